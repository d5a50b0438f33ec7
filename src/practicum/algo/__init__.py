"""RL math as small pure functions: advantages, losses, weights, filters, shaping, RFT."""

from practicum.algo.advantages import flow_grpo_advantages, group_advantages, rloo_advantages
from practicum.algo.curriculum import SolveRateTracker
from practicum.algo.filters import informative_groups, staleness_mask
from practicum.algo.losses import (
    aggregate_loss,
    approx_kl,
    clip_fraction,
    decoupled_ppo_loss,
    entropy_from_logits,
    k3_kl,
    ppo_clip_loss,
    truncated_importance_weights,
)
from practicum.algo.rft import rft_loss, rft_select, rft_turn_mask
from practicum.algo.shaping import overlong_penalty, step_penalty
from practicum.algo.weights import broadcast_turn_weights, duration_weights

__all__ = [
    "SolveRateTracker",
    "aggregate_loss",
    "approx_kl",
    "broadcast_turn_weights",
    "clip_fraction",
    "decoupled_ppo_loss",
    "duration_weights",
    "entropy_from_logits",
    "flow_grpo_advantages",
    "group_advantages",
    "informative_groups",
    "k3_kl",
    "overlong_penalty",
    "ppo_clip_loss",
    "rft_loss",
    "rft_select",
    "rft_turn_mask",
    "rloo_advantages",
    "staleness_mask",
    "step_penalty",
    "truncated_importance_weights",
]
