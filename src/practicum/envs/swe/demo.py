"""Scripted demonstrations written from gold patches: the data of `practicum sft`'s warm start.

SWE-Gym and SWE-smith fine-tune on a strong model's successful trajectories before RL; with no
strong model offline, a script writes them from each TRAINING task's gold patch, in the tool
protocol the policy uses:

    <search>def NAME</search>        NAME = the function (or class) enclosing the fix
    <view>PATH A-B</view>            the lines from its definition to just past the fix
    <edit>PATH <old>..</old> <new>..</new></edit>
                                     one per hunk: the changed lines, widened by the hunk's
                                     context until the old block occurs once in the file
    <submit></submit>

`Demonstrator` is built from the training split only (`swe_suite` passes it nothing else), so
a held-out package's gold patch never reaches it. It only writes actions: the episode is run
by the real environment and its reward comes from the real tests on the resulting diff.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from typing import Callable

from practicum.envs.swe.instance import SweInstance
from practicum.envs.swe.repo import materialize, scratch_dir

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
VIEW_LINES = 40


@dataclass
class Hunk:
    path: str
    old_start: int
    """1-based line of the hunk's first old-side line."""
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(tag, text) with tag ' ' context, '-' removed, '+' added."""


def parse_hunks(patch: str) -> list[Hunk]:
    """The hunks of a unified diff, in order."""
    hunks: list[Hunk] = []
    path = None
    for line in patch.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            path = target[2:] if target.startswith("b/") else target
        elif line.startswith("--- ") or line.startswith("diff ") or line.startswith("index "):
            continue
        elif (m := _HUNK.match(line)) and path is not None:
            hunks.append(Hunk(path, int(m.group(1))))
        elif hunks and line[:1] in (" ", "-", "+"):
            hunks[-1].lines.append((line[0], line[1:]))
        elif hunks and line == "":  # a context line that lost its leading space
            hunks[-1].lines.append((" ", ""))
    return hunks


def minimal_edit(hunk: Hunk, text: str) -> tuple[str, str]:
    """(old, new) blocks for one hunk: its changed lines, widened one context line at a time
    (above first) until `old` is non-empty, occurs exactly once in `text`, and `new` is not
    empty (a deletion keeps a context line)."""
    tags = [t for t, _ in hunk.lines]
    changed = [i for i, t in enumerate(tags) if t != " "]
    lo, hi = changed[0], changed[-1]

    def blocks(a: int, b: int) -> tuple[str, str]:
        part = hunk.lines[a : b + 1]
        return (
            "\n".join(x for t, x in part if t != "+"),
            "\n".join(x for t, x in part if t != "-"),
        )

    old, new = blocks(lo, hi)
    up = True  # widen above and below in turn, above first
    while not (old.strip() and new.strip() and text.count(old) == 1):
        if up and lo > 0:
            lo -= 1
        elif hi < len(tags) - 1:
            hi += 1
        elif lo > 0:
            lo -= 1
        else:
            break  # the whole hunk: as unique as the patch itself
        up = not up
        old, new = blocks(lo, hi)
    return old, new


def apply_edit(text: str, old: str, new: str) -> str:
    return text.replace(old, new, 1)


def demonstration(instance: SweInstance, read: Callable[[str], str]) -> list[str]:
    """The actions fixing `instance` (module doc); `read(path)` gives a file's base text."""
    hunks = parse_hunks(instance.patch)
    if not hunks:
        raise ValueError(f"{instance.instance_id}: the gold patch has no hunk")
    first = hunks[0]
    texts = {h.path: read(h.path) for h in hunks}
    lines = texts[first.path].splitlines()
    offset = next(i for i, (t, _) in enumerate(first.lines) if t != " ")
    at = first.old_start + offset  # 1-based line of the first change
    end = first.old_start + sum(t != "+" for t, _ in first.lines) - 1
    def_line, name = None, None
    for n in range(min(at, len(lines)), 0, -1):
        m = _DEF.match(lines[n - 1])
        if m:
            def_line, name = n, m.group(1)
            break
    actions = []
    if name:
        actions.append(
            f"<search>def {name}</search>"
            if lines[def_line - 1].lstrip().startswith(("def", "async"))
            else f"<search>class {name}</search>"
        )
    else:
        actions.append(f"<search>{first.lines[offset][1].strip()[:60]}</search>")
    start = def_line if def_line and at - def_line < VIEW_LINES - 8 else max(1, at - 5)
    actions.append(f"<view>{first.path} {start}-{min(len(lines), max(end + 2, start + 4))}</view>")
    for h in hunks:
        old, new = minimal_edit(h, texts[h.path])
        texts[h.path] = apply_edit(texts[h.path], old, new)
        actions.append(f"<edit>{h.path}\n<old>\n{old}\n</old>\n<new>\n{new}\n</new>\n</edit>")
    actions.append("<submit></submit>")
    return actions


class Demonstrator:
    """Writes each known task's demonstration; knows only the instances it was given."""

    def __init__(self, instances: list[SweInstance]):
        self.instances = {i.instance_id: i for i in instances}

    def actions(self, task_id: str) -> list[str]:
        if task_id not in self.instances:
            raise KeyError(f"no demonstration for {task_id!r}: not a training task")
        inst = self.instances[task_id]
        folder = scratch_dir("practicum-demo-")
        try:
            base = folder / "repo"
            materialize(inst, base)
            return demonstration(inst, lambda p: (base / p).read_text(encoding="utf-8"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def __call__(self, task_id: str):
        """An actor for one episode: its i-th reply is the i-th action (then <submit>)."""
        script = self.actions(task_id)
        turn = [0]

        def act(messages) -> str:
            i = turn[0]
            turn[0] += 1
            return script[min(i, len(script) - 1)]

        return act
