"""The ML-engineering reward: failure penalty, milestone partial credit, oriented grader score.

arXiv 2509.01684 (Sec. 3.2): total failure = -10, +0.1 per milestone marker reached, a valid
submission earns the grader's held-out score, with the sign flipped for lower-is-better metrics.
How the pieces combine follows the authors' derivative code (seed_systems.md §1):

    valid:    R = orient(score) + c * k
    invalid:  R = failure_reward + c * k

with k the number of DISTINCT milestones reached and c = milestone_credit (0 when partial
credit is ablated). Milestones thus still add on a valid run, and they rank failures among
themselves without ever lifting an invalid run (at most -10 + 0.7) above a valid one.
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

    def __post_init__(self) -> None:
        if self.lower_is_better_transform not in ("negate", "exp", "inverse"):
            raise ValueError(
                "RewardConfig.lower_is_better_transform must be 'negate', 'exp' or 'inverse', "
                f"got {self.lower_is_better_transform!r}"
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


def mle_reward(
    reached: Sequence[str],
    valid: bool,
    score: float | None,
    lower_is_better: bool,
    cfg: RewardConfig = RewardConfig(),
) -> RewardBreakdown:
    """The episode reward of one ML-engineering action (formula in the module docstring).

    reached: milestones whose markers appeared (duplicates count once).
    valid/score: whether the grader accepted submission.csv, and its raw score.
    """
    unknown = [m for m in reached if m not in MILESTONES]
    if unknown:
        raise ValueError(f"unknown milestones {unknown}; expected names from {list(MILESTONES)}")
    if valid and (score is None or not math.isfinite(score)):
        raise ValueError(f"a valid submission needs a finite score, got {score!r}")
    distinct = sorted(set(reached), key=list(MILESTONES).index)
    credit = cfg.milestone_credit * len(distinct) if cfg.partial_credit else 0.0
    failure = 0.0 if valid else cfg.failure_reward
    score_credit = (
        orient_score(score, lower_is_better, cfg.lower_is_better_transform, cfg.beta)
        if valid
        else 0.0
    )
    details = {
        "milestones": distinct,
        "raw_score": score,
        "valid": valid,
        "transform": cfg.lower_is_better_transform if lower_is_better else "identity",
    }
    return RewardBreakdown(failure + credit + score_credit, failure, credit, score_credit, details)
