"""Duration-aware per-turn weights and their broadcast onto token positions."""

from __future__ import annotations

import torch
from torch import Tensor


def duration_weights(durations: Tensor, floor: float = 0.05, cap: float = 10.0) -> Tensor:
    """Duration-aware policy-gradient weights (arXiv 2509.01684, Sec. 3.1).

    With asynchronous actors an action lasting dt is sampled ~ pi(a|s) / dt times per unit of
    wall time, so its gradient share shrinks with dt. Weighting by dt restores pi-proportional
    updates:  w_k = dt_k / mean_batch(dt),  dt clamped below by `floor` seconds, w capped at `cap`.

    durations: [batch] seconds per action.  Returns: [batch] weights with mean ~1.
    """
    dt = durations.clamp(min=floor)
    return (dt / dt.mean()).clamp(max=cap)


def broadcast_turn_weights(turn_weights: Tensor, turn_index: Tensor) -> Tensor:
    """Per-token weights from per-turn weights: out[b, t] = turn_weights[turn_index[b, t]],
    and 0 where turn_index is -1 (prompt, observation and padding positions).

    turn_weights: [K] over the flat list of turns in the batch.  turn_index: [B, T] long, values
    in [-1, K).  Returns: [B, T] weights (dtype of turn_weights).
    """
    if turn_index.numel() and (turn_index.min() < -1 or turn_index.max() >= len(turn_weights)):
        raise IndexError(
            f"turn_index values must lie in [-1, {len(turn_weights)}) for {len(turn_weights)} "
            f"turn weights, got min {int(turn_index.min())} and max {int(turn_index.max())}"
        )
    gathered = turn_weights[turn_index.clamp(min=0)]
    return torch.where(turn_index >= 0, gathered, torch.zeros_like(gathered))
