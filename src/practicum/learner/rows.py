"""What the learner trains on: rows of token ids with per-token values, built by the driver.

    TrainBatch(rows, objective)          one learner step's input (`Learner.train_step`)
    TrainRow(input_ids, loss_mask, ...)  one sequence, every list aligned per position
    token_batch(rows, pad_id, ...)       a micro-batch of rows as right-padded [B, T] tensors

The driver turns episodes into rows (`practicum.batch.rl_batch`, `practicum.finetune`): rewards,
advantages, duration weights and the SFT masks are decided there, so the learner's ranks only
compute log-probs, losses and updates, the same way for every objective.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from torch import Tensor

from practicum.engine.constraint import GrammarMasks, grammars_for

Objective = Literal["policy_gradient", "cross_entropy"]
"""policy_gradient: the PPO-clip family of `algo.off_policy` on advantages (RL);
cross_entropy: -log pi of the masked tokens at temperature 1 (SFT, RFT)."""


@dataclass
class TrainRow:
    """One training sequence. Position t holds token t; its log-prob is predicted from the
    positions before it, so every per-position value refers to the token at t."""

    input_ids: list[int]
    loss_mask: list[float]
    """1 where the token enters the loss (sampled ids; SFT: minus malformed turns), else 0."""
    advantages: list[float] = field(default_factory=list)
    """Per position (0 off the mask); empty for cross-entropy."""
    weights: list[float] = field(default_factory=list)
    """Per-position loss weights (duration weights; 0 off the mask); empty: all 1."""
    behaviour_logp: list[float] = field(default_factory=list)
    """The sampler's log-prob per position (0 off the mask); empty for cross-entropy."""
    constrained: list[tuple[int, int, str]] = field(default_factory=list)
    """(start, end, grammar) spans sampled under a grammar (`practicum.engine.constraint`)."""

    @property
    def tokens(self) -> int:
        """Positions in the loss."""
        return int(sum(1 for m in self.loss_mask if m))


@dataclass
class TrainBatch:
    """One learner step's rows: `epochs` passes over `mini_batches` optimizer updates."""

    rows: list[TrainRow]
    objective: Objective = "policy_gradient"
    mini_batches: int = 1
    epochs: int = 1


@dataclass
class TokenBatch:
    """Right-padded [B, T] tensors for a micro-batch of rows."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    behaviour_logp: Tensor
    advantages: Tensor
    weights: Tensor
    allowed: GrammarMasks | None = None
    """The packed masks of the tokens each constrained position was sampled among, replayed
    from the grammar of its span (unconstrained positions hold none); None when no row has
    one."""

    def to(self, device: torch.device | str) -> TokenBatch:
        """The same batch on `device` (the model's: the loss mixes these with its log-probs)."""
        return TokenBatch(
            *(None if (v := getattr(self, f.name)) is None else v.to(device) for f in fields(self))
        )


def token_batch(
    rows: list[TrainRow],
    pad_id: int,
    device: torch.device | str = "cpu",
    tokenizer: Any = None,
    replay_grammars: bool = True,
) -> TokenBatch:
    """The rows' tensors on `device`, right-padded to the longest row; `allowed` replays each
    constrained span's grammar over its ids (with `tokenizer`, the sampler's) unless
    `replay_grammars` is off. Built on the CPU and moved once."""
    width = max(len(r.input_ids) for r in rows)

    def pad(values: list, fill: float = 0.0, dtype=torch.float32) -> Tensor:
        out = torch.full((len(rows), width), fill, dtype=dtype)
        for b, v in enumerate(values):
            out[b, : len(v)] = torch.tensor(v, dtype=dtype)
        return out

    lengths = [len(r.input_ids) for r in rows]
    return TokenBatch(
        pad([r.input_ids for r in rows], pad_id, torch.long),
        pad([[1] * n for n in lengths], 0, torch.long),
        pad([r.loss_mask for r in rows]),
        pad([r.behaviour_logp for r in rows]),
        pad([r.advantages for r in rows]),
        pad([r.weights or r.loss_mask for r in rows]),
        allowed_masks(rows, width, tokenizer) if replay_grammars else None,
    ).to(device)


def allowed_masks(rows: list[TrainRow], width: int, tokenizer: Any) -> GrammarMasks | None:
    """The replayed masks of the rows' constrained spans, as a [B, width] batch's sparse
    `GrammarMasks`; None when no row has such a span."""
    if not any(r.constrained for r in rows):
        return None
    if tokenizer is None:
        raise ValueError("token_batch: rows sampled under a grammar need the tokenizer")
    grammars = grammars_for(tokenizer)
    spans = [
        (b, start, *grammars.replay_distinct(grammar, tuple(r.input_ids[start:end])))
        for b, r in enumerate(rows)
        for start, end, grammar in r.constrained
    ]
    return GrammarMasks.from_spans((len(rows), width), spans, grammars.width)


def pad_rows(values: list[Tensor], width: int) -> Tensor:
    """Stack per-row 1-D tensors into [B, width], zero-padded on the right, on their device."""
    device = values[0].device if values else "cpu"
    out = torch.zeros(len(values), width, device=device)
    for b, v in enumerate(values):
        out[b, : len(v)] = v
    return out
