"""From episodes to per-token training tensors: rewards -> advantages -> token weights.

This module only composes the pure functions in `practicum.algo`; it holds no formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from practicum.algo.advantages import flow_grpo_advantages, group_advantages, rloo_advantages
from practicum.algo.shaping import overlong_penalty, step_penalty
from practicum.algo.weights import duration_weights
from practicum.config import AlgoConfig
from practicum.episode import Episode


def shaped_rewards(episodes: list[Episode], algo: AlgoConfig, max_seq_len: int) -> Tensor:
    """Final rewards plus the DAPO soft overlong penalty and the step penalty, when enabled."""
    r = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    if algo.overlong_cache > 0:
        lengths = torch.tensor([len(e.input_ids()) for e in episodes])
        r = r + overlong_penalty(lengths, max_seq_len, algo.overlong_cache)
    if algo.step_budget > 0 and algo.step_penalty > 0:
        steps = torch.tensor([len(e.turns) for e in episodes])
        r = r + step_penalty(steps, algo.step_budget, algo.step_penalty)
    return r


def group_index(episodes: list[Episode]) -> Tensor:
    ids: dict[str, int] = {}
    return torch.tensor([ids.setdefault(e.group_id, len(ids)) for e in episodes])


def turn_advantages(episodes: list[Episode], rewards: Tensor, algo: AlgoConfig) -> list[Tensor]:
    """Advantage of every turn, per episode. GRPO/RLOO broadcast the episode's advantage to its
    turns; Flow-GRPO normalises over all turn-samples of the group (arXiv 2510.05592)."""
    groups = group_index(episodes)
    n_turns = torch.tensor([max(1, len(e.turns)) for e in episodes])
    if algo.advantage == "flow_grpo":
        flat = flow_grpo_advantages(rewards, n_turns, groups, scale_by_std=algo.scale_by_std)
        return list(torch.split(flat, n_turns.tolist()))
    if algo.advantage == "rloo":
        adv = rloo_advantages(rewards, groups)
    else:
        adv = group_advantages(rewards, groups, scale_by_std=algo.scale_by_std)
    return [adv[i].expand(int(n)) for i, n in enumerate(n_turns)]


def turn_duration_weights(episodes: list[Episode], algo: AlgoConfig, enabled: bool) -> list[Tensor]:
    """dt_k / mean_batch(dt) per action (arXiv 2509.01684); ones when disabled."""
    n_turns = [max(1, len(e.turns)) for e in episodes]
    if not enabled:
        return [torch.ones(n) for n in n_turns]
    dts = torch.tensor([t.env_duration for e in episodes for t in e.turns] or [0.0])
    w = duration_weights(dts, floor=algo.duration_floor, cap=algo.duration_cap)
    out, i = [], 0
    for e, n in zip(episodes, n_turns):
        k = len(e.turns)
        out.append(w[i:i + k] if k else torch.ones(n))
        i += k
    return out


@dataclass
class TokenBatch:
    """Right-padded [B, T] tensors for a micro-batch. Position t holds token t; its log-prob is
    predicted from positions < t, so mask/advantages/weights refer to the token at t."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    behaviour_logp: Tensor
    advantages: Tensor
    weights: Tensor


def token_batch(episodes: list[Episode], turn_adv: list[Tensor], turn_w: list[Tensor],
                include: list[bool], pad_id: int) -> TokenBatch:
    seqs = [e.input_ids() for e in episodes]
    T = max(len(s) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T)
    blp = torch.zeros(B, T)
    adv = torch.zeros(B, T)
    wts = torch.zeros(B, T)
    for b, (e, s) in enumerate(zip(episodes, seqs)):
        n = len(s)
        ids[b, :n] = torch.tensor(s)
        attn[b, :n] = 1
        if include[b]:
            mask[b, :n] = torch.tensor(e.loss_mask(), dtype=torch.float32)
        blp[b, :n] = torch.tensor(e.behaviour_logprobs())
        turn = torch.tensor(e.turn_index(), dtype=torch.long)  # long even when empty
        on = turn >= 0
        adv[b, :n][on] = turn_adv[b][turn[on]].float()
        wts[b, :n][on] = turn_w[b][turn[on]].float()
    return TokenBatch(ids, attn, mask, blp, adv, wts)
