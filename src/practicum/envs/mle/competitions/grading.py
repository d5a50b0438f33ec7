"""Grading one submission file into a `GradeReport`, with MLE-bench's medals.

A competition's own grade.py computes the score (with `metrics` and `submission_checks`);
this module turns it into a report: valid or why not, the score, and the medal the
leaderboard awards it. The medal rule is MLE-bench's (openai/mle-bench,
mlebench/grade_helpers.py `Grader.rank_score`), itself Kaggle's progression system.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

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


# -- medals ----------------------------------------------------------------------------------


def medal_positions(n_teams: int) -> tuple[int, int, int]:
    """Leaderboard positions (1-based) whose scores are the gold, silver, bronze thresholds.

    N < 100: gold max(1, floor(0.1 N)), silver max(1, floor(0.2 N)), bronze max(1, floor(0.4 N));
    100 <= N < 250: 10, floor(0.2 N), floor(0.4 N);  250 <= N < 1000: 10 + floor(0.002 N), 50, 100;
    N >= 1000: 10 + floor(0.002 N), floor(0.05 N), floor(0.1 N).
    (The max(1, .) guards, as in MLE-bench's code, keep tiny leaderboards defined.)
    """
    n = int(n_teams)
    if n < 1:
        raise ValueError(f"a leaderboard needs at least one team, got {n}")
    if n < 100:
        return max(1, n // 10), max(1, n // 5), max(1, 2 * n // 5)
    if n < 250:
        return 10, n // 5, 2 * n // 5
    if n < 1000:
        return 10 + n // 500, 50, 100
    return 10 + n // 500, n // 20, n // 10


def medal_thresholds(leaderboard_scores: Sequence[float]) -> dict:
    """Medal thresholds from a best-first list of leaderboard scores.

    Returns {"n_teams", "gold", "silver", "bronze", "median", "positions": {...},
    "lower_is_better"}; thresholds are the scores at `medal_positions(N)`; the median is of
    all scores; direction is inferred as MLE-bench does: best (first) score < last score.
    """
    scores = [float(s) for s in leaderboard_scores]
    gold, silver, bronze = medal_positions(len(scores))
    return {
        "n_teams": len(scores),
        "gold": scores[gold - 1],
        "silver": scores[silver - 1],
        "bronze": scores[bronze - 1],
        "median": float(np.median(scores)),
        "positions": {"gold": gold, "silver": silver, "bronze": bronze},
        "lower_is_better": scores[0] < scores[-1],
    }


def medal_for(score: float, thresholds: dict, lower_is_better: bool) -> str | None:
    """ "gold", "silver", "bronze" or None: the best medal whose threshold the score reaches (ties count)."""
    for medal in ("gold", "silver", "bronze"):
        limit = thresholds[medal]
        if (score <= limit) if lower_is_better else (score >= limit):
            return medal
    return None


def above_median(score: float, thresholds: dict, lower_is_better: bool) -> bool:
    """Strictly better than the leaderboard median (MLE-bench's `above_median`)."""
    return score < thresholds["median"] if lower_is_better else score > thresholds["median"]
