"""What one action earned, judged from outside the sandbox: the typed `RunOutcome`.

`judge_run` turns a finished sandboxed run into its outcome: the milestones its stdout proves
(this run's nonce only; none for code that could read the nonce back, `self_inspection`), the
submission.csv it left, graded without following symlinks (`grade_workdir`), and the reward
(`rewards.mle_reward`). `RunOutcome.summary` and `solution_output` are what the agent may see
of it (markers redacted, the nonce never shown).

Forged markers: markers printed with a wrong nonce earn nothing. The nonce is never in a file
or argument the code can read (`launch`), only in the interpreter's memory; runs whose code
reaches for frames or code objects (`self_inspection`) get no milestone credit. Milestones
need evidence besides their marker (`evidence`). The heuristic can be evaded by obfuscated
code; the most such a forgery gains is the milestone credit (+0.7), never a valid score.
"""

from __future__ import annotations

import ast
import io
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from practicum.envs.mle.actions.self_improve import excerpt
from practicum.envs.mle.competitions.competition import Competition
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError
from practicum.envs.mle.credit.evidence import Sizes, imports_ml_library, proven
from practicum.envs.mle.credit.instrument import InstrumentResult
from practicum.envs.mle.credit.milestones import MILESTONES, parse_milestones
from practicum.envs.mle.credit.rewards import RewardBreakdown, RewardConfig, mle_reward
from practicum.envs.sandbox import RunResult, read_workdir_file
from practicum.pyast import parse as ast_parse


@dataclass
class RunOutcome:
    """What one action earned: how its run went, how its submission was graded, its reward."""

    valid: bool
    """The grader accepted the submission.csv the run left."""
    score: float | None
    """Raw grader score, in the metric's own units; None when invalid."""
    milestones: list[str]
    """Distinct milestones credited, in pipeline order."""
    reward: RewardBreakdown
    """The action's reward and its parts (failure, milestone credit, score credit)."""
    metric: str
    lower_is_better: bool
    failure_reason: str | None = None
    """Why there is no valid submission; None when valid."""
    duration: float = 0.0
    """Seconds the sandboxed run took; 0 when nothing ran."""
    crash: str | None = None
    """How the script ended abnormally ("exit code 1", "killed (timeout)"); None if it exited 0."""
    infra_error: str | None = None
    """The sandbox itself failed: not the policy's fault, nothing was graded."""
    parse_error: str | None = None
    """The reply could not be turned into code, so nothing ran."""
    instrumenter: Literal["llm", "rules", "none"] = "none"
    """Who inserted the milestone prints."""
    instrument_rejected: str | None = None
    """Why the LLM instrumenter's rewrite was not used (None when it was or there is none)."""
    instrument_seconds: float = 0.0
    """Wall time of the LLM instrumenter's call (0 without one)."""
    instrument_tokens: int = 0
    """Tokens the LLM instrumenter generated."""
    forged_markers: int = 0
    """Marker lines with a wrong nonce (or self-read ones): printed by the code, never credited."""
    self_inspection: str | None = None
    """Why the code looks able to read the run's nonce (its milestones then count as forged)."""
    unproven: list[str] = field(default_factory=list)
    """Milestones whose markers appeared without evidence of the step (`credit.evidence`)."""
    timed_out: bool = False
    """Killed at the time limit: a failure, whatever submission it left."""
    validation_score: float | None = None
    """Validation score the run printed with its `validation_scored` marker."""
    stdout: str = field(default="", repr=False)
    stderr: str = field(default="", repr=False)

    def info(self, tail_chars: int = 2000) -> dict[str, Any]:
        """JSON-able details for a step's info: every field, stdout and stderr cut to tails."""
        details = {k: v for k, v in asdict(self).items() if k not in ("stdout", "stderr")}
        details["stdout_tail"] = self.stdout[-tail_chars:]
        details["stderr_tail"] = self.stderr[-tail_chars:]
        return details

    def summary(self, output_chars: int) -> str:
        """What the agent is told about the run (markers redacted, nonce never shown)."""
        lines = [f"Run took {self.duration:.1f} s."]
        if self.crash:
            lines.append(f"The script ended abnormally: {self.crash}.")
        lines.append(
            f"Milestones reached ({len(self.milestones)}/{len(MILESTONES)}): "
            f"{', '.join(self.milestones) or 'none'}."
        )
        if self.valid:
            direction = "lower" if self.lower_is_better else "higher"
            lines.append(
                f"Submission valid: test {self.metric} = {self.score:.5g} ({direction} is better)."
            )
        else:
            lines.append(f"No valid submission: {self.failure_reason}.")
        out = solution_output(self.stdout, output_chars).strip()
        if out:
            lines.append(f"Output:\n{out}")
        err = excerpt(self.stderr.strip(), output_chars // 2).strip()
        if err and not self.valid:
            lines.append(f"Errors:\n{err}")
        return "\n".join(lines)


def judge_run(
    run: RunResult,
    code: str,
    inst: InstrumentResult,
    nonce: str,
    workdir: Path,
    comp: Competition,
    answers: pd.DataFrame,
    cfg: RewardConfig,
    max_submission_bytes: int,
    sizes: Sizes | None = None,
    anchors: tuple[float, float] | None = None,
) -> RunOutcome:
    """The outcome of `code` (as the policy wrote it; `inst` is what ran) after `run`.

    sizes: the competition's train/test row counts; with them a milestone counts only with
    its evidence (`credit.evidence`). anchors: (no-ML score, best baseline score) for the
    normalised score credit (`rewards`). A run killed at the time limit is a failure whatever
    it left behind: no score, the failure reward plus the milestones it proved before.
    """
    report = parse_milestones(run.stdout, nonce)
    inspecting = self_inspection(code)
    if inspecting and report.reached:  # it may have read the nonce from its own code
        report.forged += len(report.reached)
        report.reached = []
    valid, score, reason, rows = grade_workdir(workdir, comp, answers, max_submission_bytes)
    unproven = []
    if sizes is not None:
        unproven = [
            m
            for m in report.reached
            if not _has_evidence(m, report.evidence.get(m, []), sizes, code, rows)
        ]
        report.reached = [m for m in report.reached if m not in unproven]
    timed_out = run.killed_reason == "timeout"
    if run.killed_reason:
        crash = f"killed ({run.killed_reason})"
    elif run.returncode not in (0, None):
        crash = f"exit code {run.returncode}"
    else:
        crash = None
    if timed_out:
        valid, score = False, None
        reason = f"killed at the time limit after {run.duration:.0f} s (a run must finish)"
    elif not valid and crash:
        reason = f"{crash}; {reason}"
    breakdown = mle_reward(report.reached, valid, score, comp.lower_is_better, cfg, anchors)
    return RunOutcome(
        valid,
        score,
        list(breakdown.details["milestones"]),
        breakdown,
        comp.metric,
        comp.lower_is_better,
        failure_reason=reason,
        duration=run.duration,
        crash=crash,
        instrumenter=inst.method,
        instrument_rejected=inst.rejected_reason,
        forged_markers=report.forged,
        instrument_seconds=inst.llm_seconds,
        instrument_tokens=inst.llm_tokens,
        self_inspection=inspecting,
        validation_score=report.validation_score,
        unproven=unproven,
        timed_out=timed_out,
        stdout=run.stdout,
        stderr=run.stderr,
    )


def _has_evidence(
    milestone: str, numbers: list[int], sizes: Sizes, code: str, submission_rows: int | None
) -> bool:
    if milestone == "libraries_imported":
        return imports_ml_library(code)
    if milestone == "predictions_written":
        return submission_rows == sizes.test
    return proven(milestone, numbers, sizes)


def not_run(comp: Competition, cfg: RewardConfig, failure_reason: str, **fields: Any) -> RunOutcome:
    """The outcome of an action that did not run (unparsable reply, sandbox failure): no
    submission, no milestone, the failure reward."""
    breakdown = mle_reward([], False, None, comp.lower_is_better, cfg)
    return RunOutcome(
        False,
        None,
        [],
        breakdown,
        comp.metric,
        comp.lower_is_better,
        failure_reason=failure_reason,
        **fields,
    )


SUBMISSION = "submission.csv"
_MARKER_ONLY = re.compile(r"^\[milestone: [a-z_]+( n=-?\d+)?\]$")

_INSPECTION_NAMES = {
    "co_consts",
    "_getframe",
    "get_objects",
    "get_referrers",
    "get_referents",
    "f_code",
    "__code__",
    "currentframe",
    "f_back",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "f_locals",
    "f_globals",
    "walk_stack",
    "settrace",
    "setprofile",
    "_current_frames",
    "string_at",
    "co_code",
    "monitoring",
}
_INSPECTION_TEXT = ("practicum", "/proc/self", "/proc/1/", "/mem", *_INSPECTION_NAMES)


def self_inspection(code: str) -> str | None:
    """Why `code` may read the run's nonce, else None.

    The nonce never sits in a file or argument the code can read (`launch`): only in the
    interpreter's memory, as constants of the running code object. Reaching it takes frames,
    code objects, the garbage collector's object lists, tracing hooks or raw memory: names
    such as co_consts, _getframe, gc.get_objects, f_back, sys.settrace, ctypes.string_at or
    /proc/self/mem (as names or in string constants). Such runs get no milestone credit (a
    valid submission still scores). Reading `__file__`, `sys.argv` or the source is fine:
    they show only the policy's own code. The check is a heuristic an obfuscated script can
    evade; the most such a forgery gains is the milestone credit (+0.7), never a score.
    """
    try:
        tree = ast_parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _INSPECTION_NAMES:
            return f"uses {node.id}"
        if isinstance(node, ast.Attribute) and node.attr in _INSPECTION_NAMES:
            return f"uses .{node.attr}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            low = node.value.lower()
            for text in _INSPECTION_TEXT:
                if text.lower() in low:
                    return f"mentions {text!r}"
    return None


def solution_output(stdout: str, max_chars: int) -> str:
    """Run output for prompts: markers redacted, lines that are only a marker dropped."""
    lines = [
        ln
        for ln in excerpt(stdout, 10 * max_chars).splitlines()
        if not _MARKER_ONLY.match(ln.strip())
    ]
    return excerpt("\n".join(lines), max_chars)


def grade_workdir(
    workdir: Path, comp: Competition, answers: pd.DataFrame, max_bytes: int = 64 * 2**20
) -> tuple[bool, float | None, str | None, int | None]:
    """(valid, raw score, reason when invalid, rows of submission.csv or None) of the
    submission.csv the run left in `workdir`.

    Read with `read_workdir_file`, so a symlink (e.g. to the private answers) is never followed;
    a missing, non-regular, oversized, unparsable or rejected file is an invalid submission.
    """
    try:
        raw = read_workdir_file(workdir, SUBMISSION, max_bytes)
    except FileNotFoundError:
        return False, None, "no submission.csv was written", None
    except OSError as err:  # ELOOP: a symlink
        return False, None, f"submission.csv is not a regular file ({err.strerror or err})", None
    except ValueError as err:
        return False, None, str(err).replace(f" in {workdir}", ""), None
    try:
        frame = pd.read_csv(io.BytesIO(raw))
    except pd.errors.EmptyDataError:
        return False, None, "submission.csv is empty", None
    except Exception as err:  # any parser failure is the submission's fault
        return False, None, f"cannot parse submission.csv as CSV: {type(err).__name__}: {err}", None
    try:
        score = comp.grade(frame, answers)
    except InvalidSubmissionError as err:
        return False, None, f"invalid submission: {err}", len(frame)
    return True, score, None, len(frame)
