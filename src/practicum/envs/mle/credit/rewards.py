"""The ML-engineering reward: failure penalty, milestone partial credit, oriented grader score.

arXiv 2509.01684 (Sec. 3.2): total failure = -10, +0.1 per milestone marker reached, a valid
submission earns the grader's held-out score, with the sign flipped for lower-is-better metrics.
How the pieces combine follows the authors' derivative code (seed_systems.md §1):

    valid:    R = orient(score) + c * k
    invalid:  R = failure_reward + c * k

with k the number of DISTINCT milestones reached and c = milestone_credit (0 when partial
credit is ablated). Milestones thus still add on a valid run, and they rank failures among
themselves without ever lifting an invalid run (at most -10 + 0.7) above a valid one.

Across competitions the raw metric's units differ (an RMSE of 60 vs an accuracy of 0.9), so
with `score_scale="leaderboard"` (and anchors known) the score is normalised per competition:

    normalise(v) = clip((v - v0) / (v1 - v0), -1, 2)

with v0 the score of the competition's sample submission (a constant guess: the no-ML level,
0) and v1 the best score of its baseline leaderboard (1). It is increasing in the oriented
score whatever the metric's direction (for lower-is-better v1 < v0), so a better model always
earns more; a constant guess earns about 0, the best baseline 1; and a valid run never falls
below -1, far above any invalid run (failure_reward + at most 0.7 of milestones).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from practicum.envs.mle.credit.milestones import MILESTONES


@dataclass(frozen=True)
class RewardConfig:
    """Knobs of `mle_reward` (defaults: the paper's values)."""

    failure_reward: float = -10.0
    """Reward of a run without a valid submission, before milestone credit (total failure: this
    exact value, when nothing was reached either)."""
    milestone_credit: float = 0.1
    """Credit per distinct milestone reached (7 milestones: at most +0.7)."""
    partial_credit: bool = True
    """Ablation switch: False makes milestones worth nothing (paper: -22% without them)."""
    lower_is_better_transform: Literal["negate", "exp", "inverse"] = "negate"
    """How a lower-is-better score v becomes higher-is-better: "negate" -> -v (paper),
    "exp" -> exp(-v / beta), "inverse" -> 1 / (1 + v / beta) (both in (0, 1] for v >= 0)."""
    beta: float = 3.0
    """Scale of the "exp" and "inverse" transforms (derivative code's default)."""
    score_scale: Literal["raw", "leaderboard"] = "raw"
    """"leaderboard": normalise the score against the competition's anchors (module
    docstring) when given; "raw": the oriented metric (lower_is_better_transform)."""

    def __post_init__(self) -> None:
        if self.lower_is_better_transform not in ("negate", "exp", "inverse"):
            raise ValueError(
                "RewardConfig.lower_is_better_transform must be 'negate', 'exp' or 'inverse', "
                f"got {self.lower_is_better_transform!r}"
            )
        if self.score_scale not in ("raw", "leaderboard"):
            raise ValueError(
                f"RewardConfig.score_scale must be 'raw' or 'leaderboard', got {self.score_scale!r}"
            )
        if self.beta <= 0:
            raise ValueError(f"RewardConfig.beta must be > 0, got {self.beta}")


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and its parts: total = failure + milestone_credit + score_credit."""

    total: float
    failure: float
    """failure_reward when the submission is invalid, else 0."""
    milestone_credit: float
    """Credit from distinct milestones (0 with partial credit off)."""
    score_credit: float
    """Oriented grader score when valid, else 0."""
    details: dict[str, Any] = field(default_factory=dict)
    """Milestones counted, raw score, transform used: for logs."""


def orient_score(
    score: float, lower_is_better: bool, transform: str = "negate", beta: float = 3.0
) -> float:
    """Map a grader score to higher-is-better (arXiv 2509.01684: sign flip for ↓ metrics).

    negate: -v;  exp: exp(-v / beta);  inverse: 1 / (1 + v / beta).  Higher-is-better: v.
    """
    if not lower_is_better:
        return score
    if transform == "negate":
        return -score
    if transform == "exp":
        return math.exp(-score / beta)
    if transform == "inverse":
        return 1.0 / (1.0 + score / beta)
    raise ValueError(f"unknown lower_is_better transform {transform!r}")


NORMALISED_RANGE = (-1.0, 2.0)
"""Bounds of a normalised score (module docstring)."""


def normalise_score(score: float, anchors: tuple[float, float]) -> float:
    """clip((v - v0) / (v1 - v0), -1, 2): 0 at the no-ML level v0, 1 at the best baseline v1."""
    v0, v1 = anchors
    low, high = NORMALISED_RANGE
    return min(high, max(low, (score - v0) / (v1 - v0)))


def usable_anchors(anchors: tuple[float, float] | None) -> bool:
    return (
        anchors is not None and all(math.isfinite(a) for a in anchors) and anchors[0] != anchors[1]
    )


def mle_reward(
    reached: Sequence[str],
    valid: bool,
    score: float | None,
    lower_is_better: bool,
    cfg: RewardConfig = RewardConfig(),
    anchors: tuple[float, float] | None = None,
) -> RewardBreakdown:
    """The episode reward of one ML-engineering action (formula in the module docstring).

    reached: milestones whose markers appeared (duplicates count once).
    valid/score: whether the grader accepted submission.csv, and its raw score.
    anchors: (no-ML score, best baseline score) of the competition, in the metric's units;
    used with cfg.score_scale == "leaderboard".
    """
    unknown = [m for m in reached if m not in MILESTONES]
    if unknown:
        raise ValueError(f"unknown milestones {unknown}; expected names from {list(MILESTONES)}")
    if valid and (score is None or not math.isfinite(score)):
        raise ValueError(f"a valid submission needs a finite score, got {score!r}")
    distinct = sorted(set(reached), key=list(MILESTONES).index)
    credit = cfg.milestone_credit * len(distinct) if cfg.partial_credit else 0.0
    failure = 0.0 if valid else cfg.failure_reward
    normalised = cfg.score_scale == "leaderboard" and usable_anchors(anchors)
    if not valid:
        score_credit = 0.0
    elif normalised:
        score_credit = normalise_score(score, anchors)
    else:
        score_credit = orient_score(score, lower_is_better, cfg.lower_is_better_transform, cfg.beta)
    if normalised:
        transform = "leaderboard"
    else:
        transform = cfg.lower_is_better_transform if lower_is_better else "identity"
    details = {"milestones": distinct, "raw_score": score, "valid": valid, "transform": transform}
    return RewardBreakdown(failure + credit + score_credit, failure, credit, score_credit, details)
