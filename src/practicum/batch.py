"""From episodes to training rows and per-token tensors: rewards -> advantages -> token weights.

An episode gives one row per segment (`Episode.segments`); advantages and weights are per turn
and reach tokens through each position's turn index. This module only composes the pure
functions in `practicum.algo`; it holds no formula.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from practicum.algo.advantages import flow_grpo_advantages, group_advantages, rloo_advantages
from practicum.algo.baselines import TaskBaselines
from practicum.algo.shaping import overlong_penalty, step_penalty
from practicum.algo.weights import broadcast_turn_weights, duration_weights
from practicum.config import AlgoConfig
from practicum.engine.constraint import grammars_for
from practicum.episode import Episode, Segment


def shaped_rewards(episodes: list[Episode], algo: AlgoConfig, response_budget: int) -> Tensor:
    """Final rewards plus the DAPO soft overlong penalty on each episode's sampled tokens
    (against `response_budget` = max_new_tokens * max_turns) and the step penalty, when on."""
    r = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    if algo.overlong_cache > 0:
        lengths = torch.tensor([e.num_sampled for e in episodes])
        r = r + overlong_penalty(lengths, response_budget, min(algo.overlong_cache,
                                                                response_budget))
    if algo.step_budget > 0 and algo.step_penalty > 0:
        steps = torch.tensor([len(e.turns) for e in episodes])
        r = r + step_penalty(steps, algo.step_budget, algo.step_penalty)
    return r


def group_index(episodes: list[Episode]) -> Tensor:
    ids: dict[str, int] = {}
    return torch.tensor([ids.setdefault(e.group_id, len(ids)) for e in episodes], dtype=torch.long)


def turn_advantages(episodes: list[Episode], rewards: Tensor, algo: AlgoConfig,
                    baselines: TaskBaselines | None = None) -> list[Tensor]:
    """Advantage of every turn, per episode ([len(turns)] each). GRPO, RLOO and the running
    baseline give the episode's advantage to all its turns; Flow-GRPO makes every turn a sample
    and normalises over all turn-samples of the group (arXiv 2510.05592)."""
    n_turns = torch.tensor([len(e.turns) for e in episodes], dtype=torch.long)
    if algo.advantage == "flow_grpo":
        flat = flow_grpo_advantages(rewards, n_turns, group_index(episodes),
                                    scale_by_std=algo.scale_by_std)
        return list(torch.split(flat, n_turns.tolist()))
    if algo.advantage == "baseline":
        if baselines is None:
            raise ValueError("advantage=baseline needs the learner's TaskBaselines")
        adv = baselines.advantages([e.task_id for e in episodes], rewards)
    elif algo.advantage == "rloo":
        adv = rloo_advantages(rewards, group_index(episodes))
    else:
        adv = group_advantages(rewards, group_index(episodes), scale_by_std=algo.scale_by_std)
    return [adv[i].expand(int(n)) for i, n in enumerate(n_turns)]


def turn_duration_weights(episodes: list[Episode], algo: AlgoConfig,
                          include: list[bool] | None = None) -> list[Tensor]:
    """dt_k / mean_batch(dt) per action (arXiv 2509.01684) when on; ones when off. The batch
    mean is over the turns that are trained (`include`), so masked episodes do not shift it."""
    n_turns = [len(e.turns) for e in episodes]
    include = include if include is not None else [True] * len(episodes)
    out = [torch.ones(n) for n in n_turns]
    kept = [i for i, e in enumerate(episodes) if include[i] and e.turns]
    if not algo.duration_weights or not kept:
        return out
    dts = torch.tensor([t.env_duration for i in kept for t in episodes[i].turns])
    w = duration_weights(dts, floor=algo.duration_floor, cap=algo.duration_cap)
    for i, wi in zip(kept, torch.split(w, [n_turns[i] for i in kept])):
        out[i] = wi
    return out


def trainable(episodes: list[Episode], algo: AlgoConfig) -> list[bool]:
    """Whether each episode enters the loss: it sampled something, and is not an overlong
    episode under `mask_overlong` (DAPO overlong filtering)."""
    return [e.num_sampled > 0 and not (algo.mask_overlong and e.overlong) for e in episodes]


@dataclass
class Row:
    """One training row: a segment of episode `episode` (an index into the batch)."""

    episode: int
    segment: Segment

    @property
    def tokens(self) -> int:
        return sum(self.segment.loss_mask)


def training_rows(episodes: list[Episode], include: list[bool]) -> list[Row]:
    return [Row(i, seg) for i, e in enumerate(episodes) if include[i] for seg in e.segments()]


@dataclass
class TokenBatch:
    """Right-padded [B, T] tensors for a micro-batch of rows. Position t holds token t; its
    log-prob is predicted from positions < t, so mask/advantages/weights refer to the token at t."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    behaviour_logp: Tensor
    advantages: Tensor
    weights: Tensor
    allowed: Tensor | None = None
    """[B, T, W] packed int32 masks of the tokens position t was sampled among, replayed from
    the grammar of its turn (`practicum.engine.constraint`; all bits set where unconstrained);
    None when no row was sampled under a grammar."""

    def to(self, device: torch.device | str) -> TokenBatch:
        """The same batch on `device` (the model's: the loss mixes these with its log-probs)."""
        return TokenBatch(*(None if (v := getattr(self, f.name)) is None else v.to(device)
                            for f in fields(self)))


def token_batch(rows: list[Row], turn_adv: list[Tensor], turn_w: list[Tensor],
                pad_id: int, device: torch.device | str = "cpu",
                tokenizer: Any = None) -> TokenBatch:
    """The rows' tensors on `device`; per-turn advantages/weights land on each turn's sampled
    tokens; `allowed` replays each constrained turn's grammar over its sampled ids (with
    `tokenizer`, the sampler's). Built on the CPU (row by row) and moved once."""
    T = max(len(r.segment.input_ids) for r in rows)
    B = len(rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T)
    blp = torch.zeros(B, T)
    turn = torch.full((B, T), -1, dtype=torch.long)  # index into the flat per-turn vectors
    offset = 0
    for b, r in enumerate(rows):
        seg, n = r.segment, len(r.segment.input_ids)
        ids[b, :n] = torch.tensor(seg.input_ids)
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(seg.loss_mask, dtype=torch.float32)
        blp[b, :n] = torch.tensor(seg.behaviour_logprobs)
        local = torch.tensor(seg.turn_index, dtype=torch.long)
        turn[b, :n] = torch.where(local >= 0, local + offset, local)
        offset += len(turn_adv[r.episode])
    flat_adv = torch.cat([turn_adv[r.episode].float() for r in rows])
    flat_w = torch.cat([turn_w[r.episode].float() for r in rows])
    return TokenBatch(ids, attn, mask, blp, broadcast_turn_weights(flat_adv, turn),
                      broadcast_turn_weights(flat_w, turn),
                      allowed_masks(rows, T, tokenizer)).to(device)


def allowed_masks(rows: list[Row], width: int, tokenizer: Any) -> Tensor | None:
    """[B, width, W] packed masks: every bit set, except on the sampled positions of
    constrained turns, which get their grammar's replayed masks; None when no turn is."""
    if not any(r.segment.constrained for r in rows):
        return None
    if tokenizer is None:
        raise ValueError("token_batch: rows sampled under a grammar need the tokenizer")
    grammars = grammars_for(tokenizer)
    out = torch.full((len(rows), width, grammars.width), -1, dtype=torch.int32)
    for b, r in enumerate(rows):
        for start, end, grammar in r.segment.constrained:
            out[b, start:end] = grammars.replay(grammar, tuple(r.segment.input_ids[start:end]))
    return out


def pad_rows(values: list[Tensor], width: int) -> Tensor:
    """Stack per-row 1-D tensors into [B, width], zero-padded on the right, on their device."""
    device = values[0].device if values else "cpu"
    out = torch.zeros(len(values), width, device=device)
    for b, v in enumerate(values):
        out[b, :len(v)] = v
    return out
