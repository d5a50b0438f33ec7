"""Reward shaping: DAPO soft overlong punishment and a step-budget penalty."""

from __future__ import annotations

import torch
from torch import Tensor


def overlong_penalty(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, eq. 13), added to the
    reward:

        0                                       if L <= max_len - cache_len
        (max_len - cache_len - L) / cache_len   if max_len - cache_len < L <= max_len
        -1                                      if L > max_len

    lengths: [N] response lengths in tokens.  Returns: [N] float penalties in [-1, 0].
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}"
        )
    # The linear ramp is 0 at max_len - cache_len and -1 at max_len; clamping gives both flat parts.
    ramp = (max_len - cache_len - lengths.to(torch.get_default_dtype())) / cache_len
    return ramp.clamp(min=-1.0, max=0.0)


def step_penalty(num_steps: Tensor, budget: int, per_step: float) -> Tensor:
    """Linear penalty past a step budget (SWE agents with RL, arXiv 2508.03501), added to the
    reward:  -per_step * max(0, steps - budget).

    num_steps: [N] turns taken.  Returns: [N] float penalties <= 0.
    """
    if budget < 0 or per_step < 0:
        raise ValueError(
            f"need budget >= 0 and per_step >= 0, got budget={budget}, per_step={per_step}"
        )
    return -per_step * (num_steps - budget).clamp(min=0).to(torch.get_default_dtype())
