"""Sample filters: DAPO dynamic sampling and the asynchronous staleness bound."""

from __future__ import annotations

import math

from torch import Tensor


def informative_groups(rewards: Tensor, group_ids: Tensor, tol: float = 1e-8) -> Tensor:
    """DAPO dynamic sampling (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2): a group whose rewards
    are all equal (max - min <= tol) has zero advantage everywhere and no gradient; drop it.

    rewards: [N].  group_ids: [N] int.  Returns: [N] bool, False for members of such groups.
    """
    if rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must have the same shape, "
            f"got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    _, inverse = group_ids.unique(return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    values = rewards.double()
    group_max = values.new_full((num_groups,), -math.inf).scatter_reduce(0, inverse, values, "amax")
    group_min = values.new_full((num_groups,), math.inf).scatter_reduce(0, inverse, values, "amin")
    return (group_max - group_min)[inverse] > tol


def staleness_mask(sample_versions: Tensor, current_version: int, max_staleness: int) -> Tensor:
    """Bounded staleness for asynchronous RL (as in AReaL's max_head_offpolicyness, arXiv
    2505.24298): keep a sample iff  current_version - version <= max_staleness.
    max_staleness = 0 keeps only on-policy samples.

    sample_versions: [N] int policy version that sampled each item.  Returns: [N] bool.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    return (current_version - sample_versions) <= max_staleness
