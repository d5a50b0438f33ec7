"""MLE-bench's medal rule (openai/mle-bench, mlebench/grade_helpers.py `Grader.rank_score`),
itself Kaggle's progression system: thresholds from a leaderboard, and the medal a score earns.

A competition reads its thresholds here and grading reports the medal; neither needs the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
    """ "gold", "silver", "bronze" or None: the best medal whose threshold the score reaches
    (ties count)."""
    for medal in ("gold", "silver", "bronze"):
        limit = thresholds[medal]
        if (score <= limit) if lower_is_better else (score >= limit):
            return medal
    return None


def above_median(score: float, thresholds: dict, lower_is_better: bool) -> bool:
    """Strictly better than the leaderboard median (MLE-bench's `above_median`)."""
    return score < thresholds["median"] if lower_is_better else score > thresholds["median"]
