"""Self-improvement prompts (arXiv 2509.01684, Sec. 3.3): improve a previous solution.

Half of the prompts (p) ask to improve an earlier solution of the same task, showing its code,
its (marker-redacted) output and its score; the rest ask to solve from scratch. Only valid
solutions are kept by default: the paper dropped debug-from-failure prompts because small
models debug poorly. `SolutionBuffer` keeps the best K solutions per task, on disk as JSON.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from practicum.envs.mle.credit.milestones import redact_markers


@dataclass(frozen=True)
class Solution:
    """One earlier attempt at a task."""

    code: str
    """The script (script mode) or the region code (template mode) the policy wrote."""
    output: str
    """Excerpt of what the run printed, markers redacted (`excerpt`)."""
    score: float | None
    """Raw grader score of the submission (None when invalid)."""
    reward: float
    """The reward it earned: higher is better, used to rank solutions."""
    plan: str = ""
    """The natural-language plan that came with the code."""
    valid: bool = True
    """Whether the submission was graded valid."""


def excerpt(text: str, max_chars: int = 2000) -> str:
    """`text` with markers redacted, cut in the middle to ~max_chars (head 1/3, tail 2/3)."""
    text = redact_markers(text)
    if len(text) <= max_chars:
        return text
    head, tail = max_chars // 3, max_chars - max_chars // 3
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"


def sample_prompt_mode(
    rng: random.Random, p: float = 0.5, can_improve: bool = True
) -> Literal["scratch", "improve"]:
    """Return "improve" with probability p when there is something to improve, else "scratch".

    Always draws one number from `rng`, so the random stream does not depend on the buffer.
    """
    draw = rng.random()
    return "improve" if can_improve and draw < p else "scratch"


MAX_GROUPS = 4096
"""Groups whose prompt choice a buffer remembers (the oldest is forgotten first)."""


class SolutionBuffer:
    """The best `k` solutions of each task, ranked by reward (thread-safe, JSON on disk)."""

    def __init__(self, k: int = 4, valid_only: bool = True):
        if k < 1:
            raise ValueError(f"SolutionBuffer k must be >= 1, got {k}")
        self.k = k
        self.valid_only = valid_only
        self._tasks: dict[str, list[Solution]] = {}
        self._groups: OrderedDict[str, Solution | None] = OrderedDict()
        """Group id -> the solution its prompt shows (None: from scratch)."""
        self._lock = threading.Lock()

    def add(self, task_id: str, solution: Solution) -> bool:
        """Offer a solution; True if it is now among the task's best k."""
        if self.valid_only and not solution.valid:
            return False
        with self._lock:
            kept = [
                s
                for s in self._tasks.get(task_id, [])
                if s.code != solution.code or s.reward > solution.reward
            ]
            if any(s.code == solution.code for s in kept):
                return False
            kept.append(solution)
            kept.sort(key=lambda s: s.reward, reverse=True)
            self._tasks[task_id] = kept[: self.k]
            return solution in self._tasks[task_id]

    def solutions(self, task_id: str) -> list[Solution]:
        """The kept solutions of a task, best first."""
        with self._lock:
            return list(self._tasks.get(task_id, []))

    def has(self, task_id: str) -> bool:
        return bool(self.solutions(task_id))

    def best(self, task_id: str) -> Solution | None:
        kept = self.solutions(task_id)
        return kept[0] if kept else None

    def previous_for(
        self, group: str | None, task_id: str, rng: random.Random, improve_prob: float
    ) -> Solution | None:
        """What a training prompt shows: a kept solution to improve, or None (from scratch),
        drawn with `rng`. With a `group`, drawn once and shared by every member: a GRPO group
        is samples of one prompt (and the learner then runs that prompt once per group)."""
        with self._lock:
            if group is not None and group in self._groups:
                self._groups.move_to_end(group)
                return self._groups[group]
        mode = sample_prompt_mode(rng, improve_prob, self.has(task_id))
        chosen = self.pick(task_id, rng) if mode == "improve" else None
        if group is None:
            return chosen
        with self._lock:  # a member that drew at the same time takes the first one's
            chosen = self._groups.setdefault(group, chosen)
            while len(self._groups) > MAX_GROUPS:
                self._groups.popitem(last=False)
        return chosen

    def pick(self, task_id: str, rng: random.Random) -> Solution:
        """A kept solution chosen uniformly (diversity among the top k); KeyError if none."""
        kept = self.solutions(task_id)
        if not kept:
            raise KeyError(f"no solution stored for task {task_id!r}")
        return kept[rng.randrange(len(kept))]

    def state(self) -> dict:
        """The buffer as a JSON-able dict (what `save` writes and checkpoints keep)."""
        with self._lock:
            return {
                "k": self.k,
                "valid_only": self.valid_only,
                "tasks": {t: [asdict(s) for s in kept] for t, kept in self._tasks.items()},
            }

    def load_state(self, data: dict) -> None:
        """Replace the contents with a `state()` dict; ValueError if it is not one."""
        try:
            tasks = {t: [Solution(**s) for s in kept] for t, kept in data["tasks"].items()}
            k, valid_only = int(data["k"]), bool(data["valid_only"])
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ValueError(f"not a solution buffer state: {err!r}") from err
        with self._lock:
            self.k, self.valid_only, self._tasks = k, valid_only, tasks

    def save(self, path: str | Path) -> None:
        """Write the buffer as JSON atomically (temp file in the same folder, then rename)."""
        path = Path(path)
        data = self.state()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path) -> SolutionBuffer:
        """Read a buffer written by `save`."""
        buffer = cls()
        try:
            buffer.load_state(json.loads(Path(path).read_text()))
        except (ValueError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is not a solution buffer: {err}") from err
        return buffer


def improvement_prompt(
    task_description: str,
    previous_code: str,
    previous_output: str,
    previous_score: float | None,
    mode: Literal["script", "template"] = "script",
    lower_is_better: bool | None = None,
    max_output_chars: int = 1500,
    reply_format: str | None = None,
) -> str:
    """Ask to improve an earlier solution, showing its code, output and score.

    task_description: the task's scratch prompt (`prompts.scratch_prompt`), which already
    states the reply format; this prompt only adds the previous attempt and the request.
    reply_format: replaces the closing sentence on the reply's form (e.g. one bare line).
    """
    if previous_score is None:
        score = "it produced no valid submission"
    else:
        directions = {None: "", True: " (lower is better)", False: " (higher is better)"}
        direction = directions[lower_is_better]
        score = f"its test score was {previous_score:.5g}{direction}"
    output = excerpt(previous_output, max_output_chars).strip() or "(nothing)"
    reply = (
        "Reply with a short plan, then the full improved script in one ```python block."
        if mode == "script"
        else "Reply with only the improved code for the region in one ```python block."
    )
    reply = reply_format or reply
    return (
        f"{task_description.rstrip()}\n\n"
        f"Here is a previous solution; {score}.\n```python\n{previous_code.strip()}\n```\n"
        f"Its output:\n```\n{output}\n```\n"
        f"Improve this solution to get a better test score. {reply}"
    )
