"""The agent's tools: one per turn, written as a tag the environment parses.

    <bash>pytest -q tests/test_x.py</bash>            run a shell command in the repository
    <view>pkg/mod.py 10-40</view>                     show numbered lines (range optional);
                                                      a pytest node id shows its file from
                                                      the test's definition, a bare file name
                                                      the one file of that name (with a note)
    <search>def camelize</search>                     grep the repository for a fixed string
    <edit>pkg/mod.py
    <old>
    exact lines to replace
    </old>
    <new>
    replacement lines
    </new>
    </edit>                                           replace one exact, unique snippet
    <submit></submit>                                 end the episode; the diff is graded

Each tool is a `practicum.tools.Tool` and the tags are its `TagSyntax`: every closing tag is a
stop string of the episode; none is a prefix of its own opening tag (a bare ``` fence would
stop generation at the opening fence). The first complete tag of a reply is the action; a
reply with none, or a tag cut before its closer, is malformed; a call its tool rejects (a
view without a path) is an error result. Every tool runs in the sandbox (`Workspace.run`):
the trusted side never reads or writes a file of the workspace itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from practicum.envs.sandbox import Limits, RunResult
from practicum.envs.swe.workspace import Workspace
from practicum.tools import Call, CallError, TagSyntax, Tool, ToolResult, ToolSet

_EDIT = re.compile(
    r"\A\s*(?P<path>[^\n<]+?)\s*\n\s*<old>\n?(?P<old>.*?)\n?</old>\s*"
    r"<new>\n?(?P<new>.*?)\n?</new>\s*\Z",
    re.S,
)
_VIEW = re.compile(r"\A\s*(?P<path>\S+)(?:\s+(?P<start>\d+)\s*(?:[-:,]\s*(?P<end>\d+))?)?\s*\Z")

FORMAT_HELP = (
    "Use exactly one tool per reply: <bash>command</bash>, <view>path 1-40</view>, "
    "<search>text</search>, <edit>path\n<old>\nexact old lines\n</old>\n<new>\nnew "
    "lines\n</new>\n</edit>, or <submit></submit> when the fix is done."
)

ParseError = CallError
"""The reply holds no usable tool call; the message is the corrective observation."""


def truncate(text: str, max_chars: int) -> str:
    """Head and tail of `text` around a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 60, 20)
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


# Small scripts run by the sandbox's interpreter in isolated mode (-I: the repository's own
# modules cannot shadow json or sys); their input comes on stdin as JSON.
_VIEW_SCRIPT = r"""
import json, os, re, sys
a = json.load(sys.stdin)
p, note = a["path"], ""
if "::" in p:  # a pytest node id: its file, from its test's definition (in its classes)
    p, _, test = p.partition("::")
    *classes, name = test.split("[", 1)[0].split("::")  # parameters may hold "::" or "-"
    note = f"(node id: showing {p}"
    try:
        text = open(p, encoding="utf-8", errors="replace").read().splitlines()
        hit = 0
        for kind, word in [("class", c) for c in classes] + [("(async\\s+)?def", name)]:
            hit = next((i for i, l in enumerate(text[hit:], hit + 1)
                        if re.match(rf"\s*{kind}\s+{re.escape(word)}\b", l)), None)
            if hit is None:
                break
    except OSError:
        hit = None
    if hit and not a["start"]:
        a["start"] = hit
        note += f" from the definition of {name}"
    note += ")"
if not os.path.exists(p) and "/" not in p:  # a bare file name: the one file of that name
    found = sorted(os.path.relpath(os.path.join(d, p)) for d, ds, fs in os.walk(".")
                   if p in fs and ".git" not in d.split(os.sep))
    if len(found) == 1:
        note = (note + " " if note else "") + f"(no {p} at the top; showing {found[0]})"
        p = found[0]
    elif found:
        print(f"{p} is ambiguous: {', '.join(found[:5])}"); sys.exit(3)
if note:
    print(note)
if os.path.isdir(p):
    names = sorted(os.listdir(p))
    print("\n".join(n + ("/" if os.path.isdir(os.path.join(p, n)) else "") for n in names
                    if n != ".git"))
    sys.exit(0)
try:
    lines = open(p, encoding="utf-8", errors="replace").read().splitlines()
except OSError as e:
    print(f"cannot open {p}: {e.strerror}"); sys.exit(3)
start = max(1, a["start"] or 1)
end = min(len(lines), a["end"] or start + a["window"] - 1)
if start > len(lines):
    print(f"{p} has only {len(lines)} lines"); sys.exit(3)
for i in range(start, end + 1):
    print(f"{i:5d} {lines[i - 1]}")
if end < len(lines):
    last = min(len(lines), end + a["window"])
    print(f"({len(lines) - end} more lines; view {p} {end + 1}-{last})")
"""

_EDIT_SCRIPT = r"""
import json, sys
a = json.load(sys.stdin)
p, old, new = a["path"], a["old"], a["new"]
try:
    text = open(p, encoding="utf-8").read()
except (OSError, UnicodeDecodeError) as e:
    print(f"cannot open {p}: {e}"); sys.exit(3)
n = text.count(old)
if n == 0:
    hint = ""
    first = old.strip().splitlines()[0].strip() if old.strip() else ""
    if first and first in text:
        line = text[:text.index(first)].count("\n") + 1
        hint = (f" Its first line appears at line {line}: copy the old lines exactly, "
                "indentation included.")
    print(f"The <old> snippet was not found in {p}; nothing changed.{hint}"); sys.exit(3)
if n > 1:
    at, lines, i = 0, [], text.find(old)
    while i != -1:
        lines.append(str(text[:i].count("\n") + 1)); i = text.find(old, i + 1)
    print(f"The <old> snippet occurs {n} times in {p} (lines {', '.join(lines)}); include more "
          f"lines so it is unique; nothing changed."); sys.exit(3)
i = text.index(old)
out = text[:i] + new + text[i + len(old):]
with open(p, "w", encoding="utf-8") as f:
    f.write(out)
first = text[:i].count("\n") + 1
shown = out.splitlines()[max(0, first - 3): first + new.count("\n") + 3]
print(f"Edited {p} at line {first}:")
for k, l in enumerate(shown, max(1, first - 2)):
    print(f"{k:5d} {l}")
"""


@dataclass
class Shell:
    """Where every tool runs: the episode's workspace, one sandboxed command per call."""

    ws: Workspace
    limits: Limits

    def run(self, argv: list[str], stdin: str | None = None) -> RunResult:
        return self.ws.run(argv, self.limits, stdin=stdin)

    def script(self, script: str, arg: dict) -> ToolResult:
        """One of the scripts above, `arg` on stdin; exit 3 is the script's own error."""
        res = self.run(["python", "-I", "-c", script], stdin=json.dumps(arg))
        if res.returncode in (0, 3):
            return ToolResult(
                res.stdout.rstrip("\n"), error=res.returncode != 0, seconds=res.duration
            )
        return ToolResult(_format(res), error=True, seconds=res.duration)


class Bash(Tool):
    name = "bash"
    grammar = 'bash: "<bash>" command "</bash>"'

    def __init__(self, shell: Shell):
        self.shell = shell

    def execute(self, command: str) -> ToolResult:
        res = self.shell.run(["bash", "-c", command.strip()])
        return ToolResult(_format(res), error=not res.ok, seconds=res.duration)


class View(Tool):
    name = "view"
    grammar = 'view: "<view>" path RANGE? "</view>"'

    def __init__(self, shell: Shell, lines: int = 40):
        self.shell, self.lines = shell, lines

    def parse(self, body: str) -> dict:
        m = _VIEW.match(body)
        if m is None:
            raise CallError("Usage: <view>path</view> or <view>path 10-40</view>")
        start = int(m["start"]) if m["start"] else None
        end = int(m["end"]) if m["end"] else None
        if start and end and end < start:
            raise CallError(f"The line range {start}-{end} is empty.")
        if start and end and end - start >= 4 * self.lines:
            end = start + 4 * self.lines - 1
        return {"path": m["path"], "start": start, "end": end, "window": self.lines}

    def execute(self, args: dict) -> ToolResult:
        return self.shell.script(_VIEW_SCRIPT, args)


class Search(Tool):
    name = "search"
    grammar = 'search: "<search>" search_text "</search>"'

    def __init__(self, shell: Shell, max_hits: int = 30):
        self.shell, self.max_hits = shell, max_hits

    def parse(self, body: str) -> str:
        text = body.strip()
        if "\n" in text:
            raise CallError("<search> takes one line of text.")
        return text

    def execute(self, text: str) -> ToolResult:
        res = self.shell.run(["grep", "-rnIF", "--exclude-dir=.git", "-e", text, "."])
        if res.returncode == 1:
            return ToolResult(f"No match for {text!r}.", seconds=res.duration)
        lines = res.stdout.splitlines()
        out = "\n".join(line.removeprefix("./") for line in lines[: self.max_hits])
        if len(lines) > self.max_hits:
            out += f"\n({len(lines) - self.max_hits} more matches)"
        return ToolResult(out if res.ok else _format(res), error=not res.ok, seconds=res.duration)


class Edit(Tool):
    name = "edit"
    grammar = 'edit: "<edit>" path "\\n<old>\\n" old "\\n<new>\\n" new "\\n</edit>"'

    def __init__(self, shell: Shell):
        self.shell = shell

    def parse(self, body: str) -> dict:
        m = _EDIT.match(body)
        if m is None:
            raise CallError(
                "Usage: <edit>path\n<old>\nexact old lines\n</old>\n<new>\nnew "
                "lines\n</new>\n</edit>"
            )
        if not m["old"]:
            raise CallError("<old> is empty: give the exact lines to replace.")
        return {"path": m["path"], "old": m["old"], "new": m["new"]}

    def execute(self, args: dict) -> ToolResult:
        return self.shell.script(_EDIT_SCRIPT, args)


class Submit(Tool):
    """Ends the episode: the environment grades the workspace's diff (never run here)."""

    name = "submit"
    grammar = 'submit: "<submit></submit>"'


TOOL_CLASSES: tuple[type[Tool], ...] = (Bash, View, Search, Edit, Submit)
SYNTAX = TagSyntax(
    [t.name for t in TOOL_CLASSES],
    FORMAT_HELP,
    bare=["submit"],
    need_body=["bash", "search", "view"],
)
STOP_STRINGS = SYNTAX.stop_strings


def parse_action(reply: str) -> Call:
    """The first complete tool tag of `reply` (a thought before it is allowed)."""
    return SYNTAX.parse(reply)


def swe_tools(
    ws: Workspace,
    command_seconds: float = 20.0,
    view_lines: int = 40,
    max_search_hits: int = 30,
    memory_mb: int = 1024,
) -> ToolSet:
    """The episode's tools over `ws`; every call is one sandboxed command."""
    shell = Shell(
        ws,
        Limits(
            wall_seconds=command_seconds, memory_mb=memory_mb, max_processes=64, output_bytes=16_000
        ),
    )
    return ToolSet(
        [
            Bash(shell),
            View(shell, view_lines),
            Search(shell, max_search_hits),
            Edit(shell),
            Submit(),
        ]
    )


def _format(res: RunResult) -> str:
    """stdout, stderr and how the command ended, as the agent sees them."""
    parts = [res.stdout.rstrip("\n")] if res.stdout.strip() else []
    if res.stderr.strip():
        parts.append(res.stderr.rstrip("\n"))
    if res.killed_reason == "timeout":
        parts.append("(the command timed out and was killed)")
    elif res.killed_reason:
        parts.append(f"(killed: {res.killed_reason})")
    elif res.returncode:
        parts.append(f"(exit code {res.returncode})")
    return "\n".join(parts) or "(no output)"
