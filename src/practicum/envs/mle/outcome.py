"""What one run of the agent's code earned, judged from outside the sandbox.

`grade_workdir` grades the submission.csv a run left behind (never following symlinks);
`self_inspection` flags code that could read the run's nonce back from its own source;
`solution_output` and `run_summary` turn the run's output into what the agent may see
(markers redacted, the nonce never shown).
"""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path
from typing import Any

import pandas as pd

from practicum.envs.mle.competition import Competition
from practicum.envs.mle.milestones import MILESTONES
from practicum.envs.mle.self_improve import excerpt
from practicum.envs.mle.submission_checks import InvalidSubmissionError
from practicum.envs.sandbox import read_workdir_file

SUBMISSION = "submission.csv"
_MARKER_ONLY = re.compile(r"^\[milestone: [a-z_]+\]$")

_INSPECTION_NAMES = {"__file__", "co_consts", "_getframe", "getsource", "get_objects",
                     "f_code", "__code__", "currentframe", "getsourcelines", "__loader__"}
_INSPECTION_TEXT = ("practicum", "main.py", "/proc/self", "/proc/")


def self_inspection(code: str) -> str | None:
    """Why `code` may read its own instrumented source or code objects (and with them the
    run's nonce), else None. Heuristic: names such as __file__, co_consts, _getframe,
    gc.get_objects, sys.argv, and string constants mentioning main.py, /proc or the marker
    prefix. Such runs get no milestone credit (a valid submission still scores): the policy
    never sees the nonce, so reading it back is the only way to forge a marker.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _INSPECTION_NAMES:
            return f"uses {node.id}"
        if isinstance(node, ast.Attribute) and (node.attr in _INSPECTION_NAMES
                                                or node.attr == "argv"):
            return f"uses .{node.attr}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            low = node.value.lower()
            for text in _INSPECTION_TEXT:
                if text in low:
                    return f"mentions {text!r}"
    return None


def solution_output(stdout: str, max_chars: int) -> str:
    """Run output for prompts: markers redacted, lines that are only a marker dropped."""
    lines = [ln for ln in excerpt(stdout, 10 * max_chars).splitlines()
             if not _MARKER_ONLY.match(ln.strip())]
    return excerpt("\n".join(lines), max_chars)


def grade_workdir(workdir: Path, comp: Competition, answers: pd.DataFrame,
                  max_bytes: int = 64 * 2**20) -> tuple[bool, float | None, str | None]:
    """(valid, raw score, reason when invalid) of the submission.csv the run left in `workdir`.

    Read with `read_workdir_file`, so a symlink (e.g. to the private answers) is never followed;
    a missing, non-regular, oversized, unparsable or rejected file is an invalid submission.
    """
    try:
        raw = read_workdir_file(workdir, SUBMISSION, max_bytes)
    except FileNotFoundError:
        return False, None, "no submission.csv was written"
    except OSError as err:  # ELOOP: a symlink
        return False, None, f"submission.csv is not a regular file ({err.strerror or err})"
    except ValueError as err:
        return False, None, str(err).replace(f" in {workdir}", "")
    try:
        frame = pd.read_csv(io.BytesIO(raw))
    except pd.errors.EmptyDataError:
        return False, None, "submission.csv is empty"
    except Exception as err:  # any parser failure is the submission's fault
        return False, None, f"cannot parse submission.csv as CSV: {type(err).__name__}: {err}"
    try:
        score = comp.grade(frame, answers)
    except InvalidSubmissionError as err:
        return False, None, f"invalid submission: {err}"
    return True, score, None


def run_summary(outcome: dict[str, Any], output_chars: int) -> str:
    """What the agent is told about a run (markers redacted, nonce never shown)."""
    lines = [f"Run took {outcome['duration']:.1f} s."]
    if outcome["crash"]:
        lines.append(f"The script ended abnormally: {outcome['crash']}.")
    reached = outcome["milestones"]
    lines.append(f"Milestones reached ({len(reached)}/{len(MILESTONES)}): "
                 f"{', '.join(reached) or 'none'}.")
    if outcome["valid"]:
        direction = "lower" if outcome["lower_is_better"] else "higher"
        lines.append(f"Submission valid: test {outcome['metric']} = {outcome['score']:.5g} "
                     f"({direction} is better).")
    else:
        lines.append(f"No valid submission: {outcome['failure_reason']}.")
    out = solution_output(outcome["stdout"], output_chars).strip()
    if out:
        lines.append(f"Output:\n{out}")
    err = excerpt(outcome["stderr"].strip(), output_chars // 2).strip()
    if err and not outcome["valid"]:
        lines.append(f"Errors:\n{err}")
    return "\n".join(lines)
