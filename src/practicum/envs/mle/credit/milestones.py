"""Milestone vocabulary, the marker lines that announce them, and the stdout parser.

The ML-engineering reward gives partial credit for progress (arXiv 2509.01684, Sec. 3.2):
a frozen instrumenter inserts a print after each high-level step of the agent's script
(import libraries -> load data -> ... -> write predictions), and regexes over the run's
stdout find which steps were reached.

A marker line is  `[[PRACTICUM:{nonce}:{milestone}]]`, optionally followed by ` value=<float>`.
The nonce is a fresh secret per run (`new_nonce`) that the policy never sees, so markers the
agent's own code prints (forged) carry a wrong nonce, earn nothing, and are counted as forged.
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass, field

MILESTONES: dict[str, str] = {
    "libraries_imported": "after the last import statement",
    "data_loaded": "after the training data is read (read_csv, np.load, open(...))",
    "features_prepared": (
        "after the feature matrix / inputs are built (X = ..., fit_transform, split)"
    ),
    "model_built": "after the model object is created (model = SomeClassifier(...))",
    "model_trained": "after the model is fitted (.fit(...))",
    "validation_scored": "after a validation score is computed (prints its value)",
    "predictions_written": "after submission.csv is written (.to_csv('submission.csv'))",
}
"""The seven milestones, in pipeline order, with where their marker goes (used in prompts)."""

MARKER_PREFIX = "[[PRACTICUM:"

# Anything that looks like a marker, whatever its nonce; group 1 nonce, 2 name, 3 value.
_MARKER = re.compile(
    r"\[\[PRACTICUM:([^:\]\s]*):([A-Za-z_]+)\]\](?:[ \t]+value=(\S+))?(?:[ \t]+n=(-?\d+))?"
)


def new_nonce() -> str:
    """A fresh secret for one run: 16 random hex characters (64 bits)."""
    return secrets.token_hex(8)


def marker_text(nonce: str, milestone: str) -> str:
    """The literal marker `[[PRACTICUM:{nonce}:{milestone}]]`."""
    if milestone not in MILESTONES:
        raise ValueError(f"unknown milestone {milestone!r}; expected one of {list(MILESTONES)}")
    if not re.fullmatch(r"[0-9a-f]+", nonce):
        raise ValueError(f"nonce must be lowercase hex, got {nonce!r}")
    return f"{MARKER_PREFIX}{nonce}:{milestone}]]"


def marker_line(nonce: str, milestone: str, value_expr: str | None = None) -> str:
    """Python source of one print statement that emits the marker (no indent, no newline).

    With `value_expr` (an expression naming the score, e.g. `acc`) the line also prints
    ` value=<float>`, taking the mean so that arrays such as cross_val_score's work too.
    `flush=True` keeps the marker even if the script is later killed by the time limit.
    """
    text = marker_text(nonce, milestone)
    if value_expr is None:
        return f"print({text!r}, flush=True)"
    value = f'float(__import__("numpy").mean({value_expr}))'
    return f"print({text + ' value=%r'!r} % {value}, flush=True)"


@dataclass
class MilestoneReport:
    """What a run's stdout proves it reached."""

    reached: list[str] = field(default_factory=list)
    """Distinct milestones with a correct-nonce marker, in order of first appearance."""
    validation_score: float | None = None
    """Last finite value printed with a correct-nonce `validation_scored` marker."""
    forged: int = 0
    """Marker-like lines whose nonce is wrong (printed by the agent's own code): never credited."""
    evidence: dict[str, list[int]] = field(default_factory=dict)
    """milestone -> the evidence numbers its correct-nonce markers printed (`credit.evidence`)."""


def parse_milestones(stdout: str, nonce: str) -> MilestoneReport:
    """Find the markers of run `nonce` in `stdout` (see module docstring)."""
    report = MilestoneReport()
    for line in stdout.splitlines():
        forged_here = False
        for match in _MARKER.finditer(line):
            found_nonce, name, value, count = match.groups()
            if found_nonce != nonce:
                forged_here = True
                continue
            if name not in MILESTONES:
                continue
            if name not in report.reached:
                report.reached.append(name)
            if count is not None:
                report.evidence.setdefault(name, []).append(int(count))
            if name == "validation_scored" and value is not None:
                number = _to_float(value)
                if number is not None:
                    report.validation_score = number
        report.forged += forged_here
    return report


def redact_markers(stdout: str) -> str:
    """Replace every marker (any nonce) by a readable `[milestone: name]` tag.

    Run output shown back to the policy (self-improvement prompts, observations) goes through
    this, so a nonce never reaches the policy even from an earlier run.
    """

    def readable(match: re.Match[str]) -> str:
        value = f" value={match.group(3)}" if match.group(3) else ""
        count = f" n={match.group(4)}" if match.group(4) else ""
        return f"[milestone: {match.group(2)}{value}{count}]"

    return _MARKER.sub(readable, stdout)


def _to_float(text: str) -> float | None:
    try:
        number = float(text.rstrip(",;"))
    except ValueError:
        return None
    return number if math.isfinite(number) else None
