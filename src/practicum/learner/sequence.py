"""Sequence parallelism: one long row's tokens split over the ranks of a sequence group, with
Ulysses all-to-all attention (DeepSpeed-Ulysses, arXiv 2309.14509).

    mesh ("data", "sequence") of world / S x S consecutive ranks   (`sequence_groups`)
    each data share of a mini-batch's rows -> the S ranks of one sequence group
    rank k of a group: positions [k c, (k + 1) c) of every row, c = ceil(T / S)
        embeddings, MLPs, norms, the output head: on its c positions only
        attention: all-to-all [B, H, c, D] -> [B, H / S, T, D], the inner attention (sdpa or
                   flash_attention_2) on every position of H / S heads, all-to-all back
    log-probs of the c positions, all-gathered into the row's [B, T] on every rank

Why Ulysses rather than ring (context) attention: it wraps the inner attention unchanged (any
kernel transformers already calls, registered as one more `attn_implementation`), so causal
masking, GQA and the kernels stay the library's; each all-to-all moves T H D / S values per
rank, constant when S grows with T; ring attention instead needs an attention whose partial
results merge by online softmax, forward and backward (a kernel of its own, or torch's
experimental `context_parallel`, which patches SDPA only), plus a zig-zag split to balance
causal work. The
price: the query heads must divide by S (key/value heads too, or they are repeated to one per
query head before the all-to-all, which costs H / KV times their traffic), so S is at most the
head count. SmolLM2-135M's 9 query / 3 key-value heads allow S = 3 (or 9, repeating the key/value
heads), not 2 or 4.

Exactness: every rank of a group holds the group's rows whole and computes the same loss from
the same gathered log-probs, so the gradient reaching a rank's slice of them is its slice of the
one-process gradient; the gather's backward just keeps it (no communication). Each rank's
parameter gradient is then its positions' share, and the sum over every rank (FSDP2's SUM
reductions over the whole mesh, `practicum.learner.sharded`) is the one-process gradient with
the whole mini-batch's normaliser (`practicum.learner.step`). The ranks of a group count as one
share of the rows (`SequenceRanks`), and their statistics are added up over the data groups
only. Rows are right-padded (`practicum.learner.rows.token_batch`), so plain causal attention
over the gathered positions is exact for every real token; padding positions are never scored.
Rows packed several to a sequence would need their segment boundaries over the gathered
positions too; they are not handled here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from practicum.engine.constraint import GrammarMasks
from practicum.engine.hf_model import model_inputs
from practicum.engine.hf_trainable import HFTrainable
from practicum.engine.sampling import positions
from practicum.errors import ConfigError, PracticumError
from practicum.learner.load import BuiltReference
from practicum.learner.ranks import Ranks

INNER = ("sdpa", "flash_attention_2")
"""The attention implementations Ulysses wraps (eager builds masks the wrapper cannot give)."""


@dataclass
class SequenceGroups:
    """This rank's place in the ("data", "sequence") mesh."""

    sequence: dist.ProcessGroup
    """The ranks splitting the same rows' positions (group rank = slice index)."""
    data: dist.ProcessGroup
    """The ranks at this rank's slice index in every sequence group (one per data share)."""
    size: int
    index: int
    data_size: int
    data_index: int


def sequence_groups(device_type: str, size: int) -> SequenceGroups:
    """The process group's ranks as world / `size` sequence groups of `size` consecutive ranks
    (so a group stays inside a node, or inside one copy of a hybrid mesh)."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world % size:
        raise PracticumError(
            f"placement.mesh.sequence={size}: {world} ranks do not split into groups of that many"
        )
    mesh = init_device_mesh(device_type, (world // size, size), mesh_dim_names=("data", "sequence"))
    return SequenceGroups(
        mesh.get_group("sequence"),
        mesh.get_group("data"),
        size,
        mesh.get_local_rank("sequence"),
        world // size,
        mesh.get_local_rank("data"),
    )


def check_model(config: Any, size: int, attn_implementation: str) -> None:
    """A model (its transformers config) against `size` sequence ranks; a one-line ConfigError
    when Ulysses cannot split its heads or does not replay its attention or its logits."""
    text = getattr(config, "text_config", None) or config
    heads = text.num_attention_heads
    if heads % size:
        fits = [d for d in range(2, heads + 1) if heads % d == 0]
        raise ConfigError(
            f"config error at placement.mesh.sequence: {size} ranks cannot split "
            f"the model's {heads} attention heads (Ulysses gives each rank "
            f"heads / sequence of them): use one of {fits}"
        )
    if attn_implementation not in INNER:
        raise ConfigError(
            f"config error at model.attn_implementation: sequence parallelism "
            f"wraps {' or '.join(INNER)}, got {attn_implementation}"
        )
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise ConfigError(
            f"config error at placement.mesh.sequence: the model has "
            f"{sorted(kinds)} layers; sequence parallelism supports full causal "
            "attention only"
        )
    if any(getattr(text, k, None) for k in ("final_logit_softcapping", "logit_scale")):
        raise ConfigError(
            "config error at placement.mesh.sequence: the model post-processes "
            "its logits (softcapping or scaling), which sequence parallelism does "
            "not replay"
        )


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` over dim 0 (piece k to group rank k); a permutation, so its gradient
    goes back by the same exchange."""

    @staticmethod
    def forward(ctx, x: Tensor, group: dist.ProcessGroup) -> Tensor:
        ctx.group = group
        x = x.contiguous()  # the exchange reads and writes row-major pieces
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


def seq_to_heads(x: Tensor, group: dist.ProcessGroup) -> Tensor:
    """[B, H, c, D], this rank's c positions of every head -> [B, H / S, S c, D], every
    position of this rank's H / S heads."""
    b, h, c, d = x.shape
    n = group.size()
    pieces = x.reshape(b, n, h // n, c, d).transpose(0, 1)  # piece k: heads of rank k
    got = _AllToAll.apply(pieces, group)  # piece k: rank k's positions of my heads
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * c, d)


def heads_to_seq(x: Tensor, group: dist.ProcessGroup) -> Tensor:
    """[B, S c, H / S, D] (an attention output) -> [B, c, H, D]: this rank's positions, every
    head."""
    b, t, h, d = x.shape
    n = group.size()
    pieces = x.reshape(b, n, t // n, h, d).transpose(0, 1)  # piece k: rank k's positions
    got = _AllToAll.apply(pieces, group)  # piece k: my positions of rank k's heads
    return got.permute(1, 2, 0, 3, 4).reshape(b, t // n, n * h, d)


class _OwnKeyValues:
    """The attention module as the inner attention sees it after the key/value heads were
    repeated to one per query head: no further grouping."""

    num_key_value_groups = 1

    def __init__(self, module: nn.Module):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def ulysses_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    *,
    inner: str,
    sequence_group: dist.ProcessGroup | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' attention-function signature (query, key, value: [B, heads, c, D] of this
    rank's positions, after RoPE) -> ([B, c, H, D], None): the `inner` attention, causal over
    the group's gathered positions. `sequence_group` comes from the backbone's keyword
    arguments (`SequenceParallelTrainable`); the mask is unused (module doc: right padding)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if sequence_group is None:
        raise RuntimeError(
            f"attn_implementation ulysses_{inner} runs only inside "
            "SequenceParallelTrainable.token_logprobs (no sequence_group given)"
        )
    heads, kv = query.shape[1], key.shape[1]
    n = sequence_group.size()
    target: Any = module
    if kv % n:  # key/value heads that do not split over the ranks: one per query head
        b, _, c, d = key.shape
        key, value = (
            t[:, :, None].expand(b, kv, heads // kv, c, d).reshape(b, heads, c, d)
            for t in (key, value)
        )
        target = _OwnKeyValues(module)
    for name in ("position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"):
        kwargs.pop(name, None)  # this rank's positions, not the gathered row's
    q, k, v = (seq_to_heads(t, sequence_group) for t in (query, key, value))
    out, _ = ALL_ATTENTION_FUNCTIONS[inner](target, q, k, v, None, is_causal=True, **kwargs)
    return heads_to_seq(out, sequence_group), None


def register_attention() -> None:
    """`ulysses_sdpa` and `ulysses_flash_attention_2` as transformers attention
    implementations (idempotent)."""
    from transformers import AttentionInterface

    for inner in INNER:
        AttentionInterface.register(f"ulysses_{inner}", partial(ulysses_attention, inner=inner))


class _GatherTokens(torch.autograd.Function):
    """[B, c] per rank -> [B, S c] on every rank, in slice order. Every rank computes the same
    loss from the result, so its gradient is the same on every rank: the backward keeps this
    rank's slice of it and sends nothing."""

    @staticmethod
    def forward(ctx, x: Tensor, group: dist.ProcessGroup, index: int) -> Tensor:
        ctx.index, ctx.width = index, x.shape[1]
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(group.size())]
        dist.all_gather(parts, x, group=group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad.narrow(1, ctx.index * ctx.width, ctx.width), None, None


class SequenceParallelTrainable(HFTrainable):
    """An `HFTrainable` whose `token_logprobs` computes this rank's slice of the positions and
    returns every position's log-probs (module doc); every rank of the sequence group calls it
    with the same rows. The model (and a built frozen reference) attends through
    `ulysses_<model.attn_implementation>`."""

    def __init__(self, cfg, lm, tokenizer, reference: BuiltReference, *, groups: SequenceGroups):
        super().__init__(cfg, lm, tokenizer, reference)
        self.groups = groups
        inner = lm.config._attn_implementation
        check_model(lm.config, groups.size, inner)
        register_attention()
        for model in (lm, reference.lm):  # the reference: built (full fine-tuning) or None
            if model is not None:
                model.set_attn_implementation(f"ulysses_{inner}")

    def token_logprobs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        temperature: float = 1.0,
        return_entropy: bool = False,
        score_mask: Tensor | None = None,
        allowed: GrammarMasks | Tensor | None = None,
        packed: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """`HFTrainable.token_logprobs` (same arguments and results, right-padded rows), this
        rank computing positions [k c, (k + 1) c) and the group gathering them; never packed
        (the config refuses a token budget with sequence parallelism)."""
        if packed:
            raise ValueError("sequence-parallel log-probs take padded rows, not packed ones")
        if temperature <= 0:
            raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
        g = self.groups
        ids, mask = input_ids.to(self.device), attention_mask.to(self.device)
        rows, width = ids.shape
        c = math.ceil(width / g.size)
        pad = g.size * c + 1 - width  # every slice full, and a target after the last position
        ids, mask = (torch.nn.functional.pad(t, (0, pad)) for t in (ids, mask))
        a, b = g.index * c, (g.index + 1) * c
        # position t is scored for token t + 1 (`HFTrainable.token_logprobs`)
        keep = (mask[:, a:b] * mask[:, a + 1 : b + 1]).bool()
        if score_mask is not None:
            keep &= torch.nn.functional.pad(score_mask.to(self.device), (0, pad))[
                :, a + 1 : b + 1
            ].bool()
        allow = None
        if allowed is not None:  # the masks of this slice's scored targets, in `keep`'s order
            if isinstance(allowed, Tensor):
                allowed = GrammarMasks.from_dense(allowed)
            row, col = keep.nonzero(as_tuple=True)
            allow = allowed.to(self.device).at(row * width + col + a + 1)
        lm, logits = (
            (self.reference.lm, self._reference_logits())
            if self._reference_active
            else (self.lm, self.logits)
        )
        if not lm.config._attn_implementation.startswith("ulysses_"):  # it would attend locally
            raise RuntimeError(
                "SequenceParallelTrainable: the model does not attend through ulysses_<kernel>"
            )
        with self._eval_mode(not torch.is_grad_enabled()):
            backbone = lm.base_model
            inputs = model_inputs(
                backbone, ids[:, a:b], mask[:, a:b], positions(mask)[:, a:b], None
            )
            hidden = backbone(**inputs, sequence_group=g.sequence).last_hidden_state
            h, tgt = hidden[keep], ids[:, a + 1 : b + 1][keep]
            step, n = self.logit_chunk_rows, h.shape[0]
            parts = [
                self._chunk_stats(
                    logits,
                    h[i : i + step],
                    tgt[i : i + step],
                    temperature,
                    return_entropy,
                    recompute=n > step,
                    allowed=None if allow is None else allow[i : i + step],
                )
                for i in range(0, n, step)
            ]  # none when this slice scores nothing
        zeros = torch.zeros(keep.shape, dtype=torch.float32, device=self.device)
        zero = zeros.new_zeros(rows, 1)
        if parts:
            logp = zeros.masked_scatter(keep, torch.cat([lp for lp, _ in parts]))
            entropy = zeros.masked_scatter(keep, torch.cat([en for _, en in parts]))
        else:  # still tied to the backbone: its backward's all-to-alls pair with the group's
            logp, entropy = zeros + hidden.flatten()[0].float() * 0, zeros
        logp = torch.cat([zero, gather_tokens(logp, g)[:, : width - 1]], dim=1)
        if not return_entropy:
            return logp
        return logp, torch.cat([zero, gather_tokens(entropy, g)[:, : width - 1]], dim=1)


def gather_tokens(x: Tensor, groups: SequenceGroups) -> Tensor:
    """This rank's [B, c] slice -> the group's [B, S c] (`_GatherTokens`)."""
    return _GatherTokens.apply(x, groups.sequence, groups.index)


class SequenceRanks(Ranks):
    """`GroupRanks` (`ranks`) for a mesh with sequence groups: the ranks of one group take one
    share of the rows (`data_rank` of `data_world`), and the statistics, the same on every rank
    of a group, are added up over one rank per group."""

    in_group = True

    def __init__(self, ranks: Ranks, groups: SequenceGroups, device: torch.device):
        self._ranks, self._groups, self._device = ranks, groups, device
        self.rank, self.world = ranks.rank, ranks.world

    @property
    def data_rank(self) -> int:
        return self._groups.data_index

    @property
    def data_world(self) -> int:
        return self._groups.data_size

    def sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self._device)
        dist.all_reduce(t, group=self._groups.data)
        return t.tolist()

    def max(self, value: float) -> float:
        return self._ranks.max(value)

    def gather(self, value: Any) -> list[Any]:
        return self._ranks.gather(value)

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        self._ranks.load_optimizer_state(optimizer, state)

    def barrier(self) -> None:
        self._ranks.barrier()
