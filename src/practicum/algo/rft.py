"""Rejection fine-tuning (RFT): keep successful episodes, train on their clean policy tokens."""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor

from practicum.algo.losses import aggregate_loss
from practicum.episode import Episode


def rft_select(episodes: Iterable[Episode], min_reward: float) -> list[Episode]:
    """Rejection sampling for RFT (arXiv 2508.03501): keep episodes with reward >= min_reward
    that ended normally (no `failure`) and were not cut off mid-generation (`overlong`)."""
    return [
        e for e in episodes if e.reward >= min_reward and e.failure is None and not e.overlong
    ]


def rft_turn_mask(episode: Episode) -> list[int]:
    """Per-position loss mask aligned with `episode.input_ids()`: 1 on sampled ids, 0 on prompt
    and observation ids and on every token of the turns listed in
    `episode.info["malformed_turns"]` (a malformed action is not behaviour to imitate)."""
    malformed = set(episode.info.get("malformed_turns", []))
    bad = sorted(k for k in malformed if not 0 <= k < len(episode.turns))
    if bad:
        raise ValueError(
            f"episode {episode.episode_id!r}: malformed_turns {bad} out of range "
            f"for {len(episode.turns)} turns"
        )
    return [
        m if k not in malformed else 0
        for m, k in zip(episode.loss_mask(), episode.turn_index())
    ]


def rft_loss(logits_logp: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy on policy tokens only: masked token-mean of -log pi(token).

        L = -sum(logp * m) / sum(m)

    logits_logp: [B, T] log-probs of the target tokens.  mask: [B, T] (e.g. `rft_turn_mask`).
    """
    return aggregate_loss(-logits_logp, mask, mode="token_mean")
