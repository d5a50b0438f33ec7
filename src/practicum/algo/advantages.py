"""Per-sample advantages from scalar rewards: GRPO, Dr. GRPO, RLOO and Flow-GRPO."""

from __future__ import annotations

import torch
from torch import Tensor


def _as_float(rewards: Tensor) -> Tensor:
    return rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())


def _group_stats(values: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample (group sum, group size, group sum of squared deviations), each [N]."""
    if values.shape != group_ids.shape or values.dim() != 1:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of the same length, "
            f"got {tuple(values.shape)} and {tuple(group_ids.shape)}"
        )
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    zeros = values.new_zeros(num_groups)
    sums = zeros.index_add(0, inverse, values)
    counts = zeros.index_add(0, inverse, torch.ones_like(values))
    mean = (sums / counts)[inverse]
    sq_dev = zeros.index_add(0, inverse, (values - mean) ** 2)
    return sums[inverse], counts[inverse], sq_dev[inverse]


def group_advantages(
    rewards: Tensor, group_ids: Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """Group-relative advantages (GRPO, Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

        A_i = (R_i - mean_g R) / (std_g R + eps)       scale_by_std=True  (GRPO, DAPO)
        A_i =  R_i - mean_g R                          scale_by_std=False (Dr. GRPO, Liu et al.
                                                                           2025, arXiv 2503.20783)

    std_g is the unbiased (n - 1) sample std, as torch.std and the DAPO/verl GRPO code use.
    A singleton group has no spread: its advantage is 0. An all-equal group also gets 0.

    rewards: [N] float.  group_ids: [N] int, equal value = same group.  Returns: [N] advantages.
    """
    rewards = _as_float(rewards)
    sums, counts, sq_dev = _group_stats(rewards, group_ids)
    centred = rewards - sums / counts
    if not scale_by_std:
        return centred
    std = (sq_dev / (counts - 1).clamp(min=1)).sqrt()
    return centred / (std + eps)


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE leave-one-out advantages (Ahmadian et al. 2024, arXiv 2402.14740).

        A_i = R_i - mean_{j != i, j in g} R_j  =  R_i - (S_g - R_i) / (n_g - 1)

    A singleton group has no other sample to compare with: its advantage is 0.

    rewards: [N] float.  group_ids: [N] int.  Returns: [N] advantages.
    """
    rewards = _as_float(rewards)
    sums, counts, _ = _group_stats(rewards, group_ids)
    others_mean = (sums - rewards) / (counts - 1).clamp(min=1)
    return torch.where(counts > 1, rewards - others_mean, torch.zeros_like(rewards))


def flow_grpo_advantages(
    episode_rewards: Tensor,
    turns_per_episode: Tensor,
    group_ids: Tensor,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Flow-GRPO advantages (AgentFlow, arXiv 2510.05592).

    Every planner turn is its own sample and carries its trajectory's final reward; the group is
    all turn-samples of the rollouts of the same task, so a trajectory with more turns weighs more
    in the group mean and std. Then A = group_advantages over the turn-samples.

    episode_rewards: [E].  turns_per_episode: [E] int >= 0.  group_ids: [E] int (task of each
    episode).  Returns: [sum(turns_per_episode)] advantages, in episode order then turn order.
    """
    if (turns_per_episode < 0).any():
        raise ValueError(f"turns_per_episode must be >= 0, got {turns_per_episode.tolist()}")
    turns = turns_per_episode.long()
    turn_rewards = episode_rewards.repeat_interleave(turns)
    turn_groups = group_ids.repeat_interleave(turns)
    return group_advantages(turn_rewards, turn_groups, scale_by_std=scale_by_std, eps=eps)
