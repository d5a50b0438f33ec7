"""Rejection fine-tuning (RFT): keep successful episodes, train on their clean policy tokens."""

from __future__ import annotations

from torch import Tensor

from practicum.algo.losses import aggregate_loss


def rft_keep(solved: bool, failed: bool, overlong: bool) -> bool:
    """Rejection sampling for RFT (arXiv 2508.03501): keep an episode that solved its task,
    ended normally (no failure) and was not cut off by a length limit (overlong)."""
    return solved and not failed and not overlong


def rft_mask(loss_mask: list[int], turn_index: list[int], malformed: set[int]) -> list[int]:
    """Per-position SFT mask of one training row: the row's loss mask (1 on sampled ids) with
    every token of a malformed turn zeroed (a malformed action is not behaviour to imitate).

    loss_mask, turn_index: aligned per position (turn_index -1 off sampled ids).
    malformed: indices of the episode's malformed turns.
    """
    if len(loss_mask) != len(turn_index):
        raise ValueError(f"loss_mask has {len(loss_mask)} positions, turn_index {len(turn_index)}")
    return [0 if k in malformed else m for m, k in zip(loss_mask, turn_index)]


def rft_loss(logp: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy on policy tokens only: masked token-mean of -log pi(token).

        L = -sum(logp * m) / sum(m)

    logp: [B, T] log-probs of the target tokens.  mask: [B, T] (e.g. from `rft_mask`).
    """
    return aggregate_loss(-logp, mask, mode="token_mean")
