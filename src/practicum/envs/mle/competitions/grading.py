"""Grading one submission file into a `GradeReport`, with MLE-bench's medals.

A competition's own grade.py computes the score (with `metrics` and `submission_checks`);
this module turns it into a report: valid or why not, the score, and the medal the
leaderboard awards it (the rule lives in `medals`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from practicum.envs.mle.competitions.medals import above_median, medal_for
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError

if TYPE_CHECKING:
    from practicum.envs.mle.competitions.competition import Competition


@dataclass
class GradeReport:
    """The outcome of grading one submission file for one competition."""

    competition_id: str
    submission: str
    """Path of the graded CSV."""
    valid: bool
    """False when the file is missing, unreadable or rejected by the grader."""
    score: float | None
    """The metric in its own units (see lower_is_better); None when invalid."""
    reason: str | None
    """Why the submission is invalid; None when valid."""
    lower_is_better: bool
    medal: str | None = None
    """"gold", "silver", "bronze" or None; None too when the competition has no leaderboard."""
    above_median: bool | None = None
    """Strictly better than the leaderboard median; None without a leaderboard or score."""
    thresholds: dict | None = None
    """`medal_thresholds(...)` of the competition's leaderboard, if it has one."""

    def to_dict(self) -> dict:
        return asdict(self)


def grade_submission(
    comp: Competition, submission_csv: str | Path, data_root: Path | None = None
) -> GradeReport:
    """Grade a CSV file; never raises for a bad submission (the report says why it is invalid).

    The answers come from `comp.prepare(data_root)` (prepared on first use). Errors in the
    competition itself (broken grade.py, data that cannot be prepared) raise
    `CompetitionError`: those are not the submission's fault.
    """
    path = Path(submission_csv)
    thresholds = comp.medal_thresholds()
    report = GradeReport(
        comp.id, str(path), False, None, None, comp.lower_is_better, thresholds=thresholds
    )
    answers = comp.prepare(data_root).answers
    try:
        score = comp.grade(path, answers)
    except InvalidSubmissionError as err:
        report.reason = str(err)
        return report
    report.valid, report.score = True, score
    if thresholds is not None and not math.isnan(score):
        report.medal = medal_for(score, thresholds, comp.lower_is_better)
        report.above_median = above_median(score, thresholds, comp.lower_is_better)
    return report
