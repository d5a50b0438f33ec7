"""The HF model the learner trains: differentiable token log-probs, the frozen base, save/load.

LoRA (peft) on frozen base weights, or full fine-tuning. The frozen base (the KL reference, and
what the model service calls "base") is the same weights with the adapter disabled; with full
fine-tuning it is a separate frozen copy, loaded on first use (`FrozenReference`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor

from practicum.engine.base import WeightUpdate
from practicum.engine.constraint import GrammarMasks, masked_logits
from practicum.engine.hf_model import (
    FrozenReference,
    Logits,
    PolicyConfig,
    eos_ids,
    pad_id,
    uses_checkpointing,
)
from practicum.engine.packed_attention import packed_layout, use_segment_attention
from practicum.engine.sampling import positions
from practicum.errors import PracticumError

META = "policy.json"


class HFTrainable:
    """Implements `practicum.engine.base.Trainable`. Not thread-safe: one caller at a time."""

    logit_chunk_rows = 2048
    """token_logprobs computes logits for at most this many scored (batch, position) rows at a
    time; under grad, when there is more than one chunk, each is recomputed in backward instead
    of kept, so logit memory stays O(rows x V) rather than O(B x T x V). One chunk is kept (no
    recompute): its memory is the same one chunk's."""

    min_shared_prefix = 8
    """token_logprobs runs a prefix shared by all rows once when it has at least this many
    tokens (`_hidden`)."""

    def __init__(self, cfg: PolicyConfig, lm, tokenizer, reference: FrozenReference):
        self.device = next(lm.parameters()).device
        if cfg.gradient_checkpointing is None:  # resolved once, on this model's device
            cfg = cfg.model_copy(
                update={"gradient_checkpointing": uses_checkpointing(cfg, self.device)}
            )
        self.cfg, self.tokenizer, self.reference = cfg, tokenizer, reference
        if cfg.gradient_checkpointing:
            _enable_checkpointing(lm)
        torch.manual_seed(cfg.seed)
        if cfg.lora:
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(
                r=cfg.lora_r,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                target_modules=list(cfg.lora_target_modules),
                task_type="CAUSAL_LM",
            )
            with warnings.catch_warnings():  # peft still calls a renamed transformers property
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
                self.model: torch.nn.Module = get_peft_model(lm, lora)
            init_adapter(lm, cfg.seed)
        else:
            self.model = lm.requires_grad_(True)
        self.model.train()
        self.lm = lm
        """The transformers CausalLM (with LoRA layers injected in place when lora)."""
        self.logits = Logits(lm)
        self.pad_id = pad_id(tokenizer, eos_ids(tokenizer, lm))
        self._reference_active = False
        self._ref_logits: Logits | None = None
        if cfg.init:
            self.load_weights(Path(cfg.init))

    # -- log-probs ------------------------------------------------------------------------------
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
        """Per-token log-probs  logp[b, t] = log softmax(z[b, t-1] / T)[x[b, t]]  (differentiable).

        input_ids, attention_mask: [B, T], any padding side. Returns [B, T] fp32; position 0,
        padding, and the first token after left padding (no real prefix) get 0. With
        return_entropy also the entropy of the same distributions, [B, T], zeroed likewise
        (a diagnostic: it carries no gradient). score_mask [B, T], optional: the positions the
        caller reads (a loss mask); the output projection over the vocabulary, the dearest part
        of the head, then runs on those positions only and the others get 0 as well.
        allowed, optional: the packed masks (`practicum.engine.constraint.GrammarMasks`, or
        dense [B, T, W] with all bits set where free) of the tokens each constrained position
        was sampled among (a grammar's); the softmax there runs over those only, so the
        log-probs and entropies are the masked, renormalised distribution's, and a token that
        was the only one allowed gets log-prob 0 and no gradient. packed: the backbone runs
        the rows' real tokens as one sequence, each row attending only to itself
        (`practicum.engine.packed_attention`): no work or memory on padding, the same values
        (a model whose head post-processes its logits runs unpacked).
        Without grad the model runs in eval mode (no dropout), so proximal and reference
        log-probs are deterministic.
        """
        if temperature <= 0:
            raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
        input_ids = input_ids.to(self.device)
        mask = attention_mask.to(self.device)
        targets = input_ids[:, 1:]
        valid = (mask[:, 1:] * mask[:, :-1]).bool()
        if isinstance(allowed, Tensor):  # dense [B, T, W] masks
            allowed = GrammarMasks.from_dense(allowed)
        allowed = None if allowed is None else allowed.to(self.device)
        lm, logits = (
            (self.reference.lm, self._reference_logits())
            if self._reference_active
            else (self.lm, self.logits)
        )
        with self._eval_mode(not torch.is_grad_enabled()):
            if logits.fp32_head:
                keep = (
                    valid
                    if score_mask is None
                    else valid & score_mask.to(self.device)[:, 1:].bool()
                )
                if packed:  # only the scored positions' states, from the packed sequence
                    h = packed_hidden(lm, input_ids, mask)[_flat_index(mask)[:, :-1][keep]]
                else:
                    h = self._hidden(lm, input_ids, mask)[:, :-1][keep]  # [N, H]
                tgt = targets[keep]
                # the mask of token t is read at t - 1: flat positions b * T + t of the kept ones
                flat = torch.arange(mask.numel(), device=self.device).view(mask.shape)[:, 1:][keep]
                step, n = self.logit_chunk_rows, h.shape[0]
                parts = [
                    self._chunk_stats(
                        logits,
                        h[a : a + step],
                        tgt[a : a + step],
                        temperature,
                        return_entropy,
                        recompute=n > step,
                        allowed=None if allowed is None else allowed.at(flat[a : a + step]),
                    )
                    for a in range(0, max(1, n), step)
                ]
                zeros = torch.zeros(valid.shape, dtype=torch.float32, device=self.device)
                logp = zeros.masked_scatter(keep, torch.cat([lp for lp, _ in parts]))
                entropy = zeros.masked_scatter(keep, torch.cat([en for _, en in parts]))
            else:
                z = logits(lm, input_ids, mask, positions(mask))[:, :-1] / temperature
                if allowed is not None:
                    z = masked_logits(z, allowed.dense()[:, 1:])  # token t's mask, at t - 1
                logp, entropy = _logp_entropy(z, targets, return_entropy)
        zero = logp.new_zeros(logp.shape[0], 1)
        logp = torch.cat([zero, logp.masked_fill(~valid, 0.0)], dim=1)
        if not return_entropy:
            return logp
        return logp, torch.cat([zero, entropy.masked_fill(~valid, 0.0)], dim=1)

    def _hidden(self, lm, input_ids: Tensor, mask: Tensor) -> Tensor:
        """The backbone's last hidden states [B, T, H]. When every row starts with the same
        `min_shared_prefix` or more real tokens (a GRPO group's prompt), that prefix runs once,
        as one row, and the rest of each row attends to its keys and values repeated across the
        batch (gradients flow back through them): the prompt's activations are identical in
        every row, so this computes the same states with the prompt's work done once. Rows of
        several groups (`prompt_runs`) go group by group, each prompt once."""
        runs = prompt_runs(input_ids, mask, self.min_shared_prefix)
        if len(runs) > 1:  # rows of several groups: each group's prompt once
            return torch.cat([self._hidden(lm, input_ids[a:b], mask[a:b]) for a, b in runs])
        n = _shared_prefix(input_ids, mask)
        pos = positions(mask)
        if (
            input_ids.shape[0] < 2
            or n < self.min_shared_prefix
            or self.cfg.lora_dropout > 0
            or self.cfg.gradient_checkpointing
        ):  # dropout masks differ per row; no cache
            return Logits.hidden(lm, input_ids, mask, pos)
        from transformers import DynamicCache

        cache = DynamicCache(config=lm.config)
        head = Logits.hidden(lm, input_ids[:1, :n], mask[:1, :n], pos[:1, :n], cache)
        cache.batch_repeat_interleave(input_ids.shape[0])
        tail = Logits.hidden(lm, input_ids[:, n:], mask, pos[:, n:], cache)
        return torch.cat([head.expand(input_ids.shape[0], -1, -1), tail], dim=1)

    @staticmethod
    def _chunk_stats(
        logits: Logits,
        hidden: Tensor,
        targets: Tensor,
        temperature: float,
        with_entropy: bool,
        recompute: bool,
        allowed: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(log-prob of targets, entropy) for a chunk of hidden states [N, H], over the tokens
        `allowed` [N, W] (packed) when given; with `recompute` (under grad) the logits are not
        kept but recomputed in backward."""

        def stats(h: Tensor) -> tuple[Tensor, Tensor]:
            z = logits.head(h)
            z = z if temperature == 1.0 else z / temperature
            return _logp_entropy(
                z if allowed is None else masked_logits(z, allowed), targets, with_entropy
            )

        if recompute and torch.is_grad_enabled() and hidden.requires_grad:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(stats, hidden, use_reentrant=False)
        return stats(hidden)

    def _reference_logits(self) -> Logits:
        if self._ref_logits is None:
            self._ref_logits = Logits(self.reference.lm)
        return self._ref_logits

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def module(self) -> torch.nn.Module:
        """The model being trained (peft-wrapped with LoRA)."""
        return self.model

    @contextmanager
    def frozen_base(self) -> Iterator[HFTrainable]:
        """Within the block token_logprobs are the frozen base model's (the KL reference):
        the adapter disabled with LoRA, the untrained copy with full fine-tuning."""
        if self.cfg.lora:
            with self.model.disable_adapter():
                yield self
            return
        self._reference_active = True
        try:
            yield self
        finally:
            self._reference_active = False

    # -- publishing and persistence --------------------------------------------------------------
    def trainable_state(self) -> dict[str, Tensor]:
        """The weights a sampler loads and `save` writes, live (no copy), named as saved: the
        adapter as peft names it (no adapter name) with LoRA, else the model's `state_dict()`
        (a tied weight under each of its names, one tensor)."""
        if self.cfg.lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict(keep_vars=True)

    def iter_full_tensors(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, Tensor]]:
        """Each of `trainable_state`'s tensors once (a tied one under its first name), floating
        ones cast to `dtype` (None: as they are). The sharded learner's iterator of the same name
        yields the same, gathered."""
        for name, tensor in distinct_tensors(self.trainable_state())[0].items():
            yield name, cast_floating(tensor.detach(), dtype)

    def weight_update(self, version: int, tensors: dict[str, Tensor]) -> WeightUpdate:
        """A sampler's update from tensors named as `trainable_state` names them."""
        if self.cfg.lora:
            peft_cfg = self.model.peft_config["default"]
            return WeightUpdate(
                version,
                "lora",
                tensors,
                {
                    "r": peft_cfg.r,
                    "lora_alpha": peft_cfg.lora_alpha,
                    "use_rslora": bool(getattr(peft_cfg, "use_rslora", False)),
                    "target_modules": sorted(peft_cfg.target_modules),
                },
            )
        return WeightUpdate(version, "full", tensors)

    def export_weights(self, version: int) -> WeightUpdate:
        """The live trainable tensors (no copy) for a sampler to load."""
        return self.weight_update(
            version, {k: v.detach() for k, v in self.trainable_state().items()}
        )

    def save(self, path: Path) -> None:
        """Write the adapter (or full weights) and tokenizer to `path`, replacing it atomically.

        A LoRA folder is a standard peft adapter (loadable by vLLM's LoRARequest); a full one is
        a standard HF model folder (usable as a model spec).
        """
        with replaced_folder(Path(path)) as tmp:
            self.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
            write_policy_meta(tmp, self.cfg)

    def load_weights(self, path: Path) -> None:
        """Load weights written by `save` into this model, in place."""
        from peft import set_peft_model_state_dict

        state = self.read_weights(Path(path))
        if self.cfg.lora:
            unexpected = set_peft_model_state_dict(self.model, state).unexpected_keys
        else:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            tied = {"lm_head.weight"} if self.lm.config.tie_word_embeddings else set()
            if set(missing) - tied:
                raise PracticumError(f"{path} lacks weights for {sorted(set(missing) - tied)[:5]}")
        if unexpected:
            raise PracticumError(
                f"{path} has weights this model does not know: {sorted(unexpected)[:5]}"
            )

    def read_weights(self, path: Path) -> dict[str, Tensor]:
        """The tensors of a folder written by `save`, as saved (a peft adapter's keys lack the
        adapter name), on this model's device; refused when not this model's kind."""
        from peft import load_peft_weights
        from safetensors.torch import load_file

        check_policy_folder(path, self.cfg.lora)
        if self.cfg.lora:
            return load_peft_weights(str(path), device=str(self.device))
        state: dict[str, Tensor] = {}
        for f in sorted(path.glob("*.safetensors")):
            state.update(load_file(f, device=str(self.device)))
        return state

    @contextmanager
    def _eval_mode(self, on: bool) -> Iterator[None]:
        was_training = self.model.training
        if on:
            self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)


def check_policy_folder(path: Path, lora: bool) -> None:
    """Refuse a folder that `HFTrainable.save` did not write, or one of the other kind (LoRA vs
    full weights), in one line."""
    if not (path / META).is_file():
        raise PracticumError(f"{path} is not a saved practicum policy (no {META})")
    meta = json.loads((path / META).read_text())
    if meta["lora"] != lora:
        raise PracticumError(
            f"{path} holds lora={meta['lora']} weights, this model has lora={lora}"
        )


def write_policy_meta(folder: Path, cfg: PolicyConfig) -> None:
    """The practicum meta of a saved policy (what kind of weights, of which model, under which
    RoPE scaling: an adapter is served on the base model scaled as it was trained)."""
    meta = {"lora": cfg.lora, "model": cfg.model}
    if cfg.rope_scaling:
        meta["rope_scaling"] = cfg.rope_scaling_dict
    (folder / META).write_text(json.dumps(meta, indent=1))


@contextmanager
def replaced_folder(path: Path) -> Iterator[Path]:
    """A temporary folder beside `path` to write into; on success it replaces `path` (moved
    aside, then renamed, then the old one deleted), on failure it is removed."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def distinct_tensors(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """`state` with each tensor object once, under its first name, and {later name: first
    name} for the names it also has (tied weights)."""
    first: dict[int, str] = {}
    out, aliases = {}, {}
    for name, tensor in state.items():
        if id(tensor) in first:
            aliases[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
            out[name] = tensor
    return out, aliases


def cast_floating(tensor: Tensor, dtype: torch.dtype | None) -> Tensor:
    """`tensor` in `dtype` when both are floating point (no copy when it already is)."""
    if dtype is None or not tensor.is_floating_point() or not dtype.is_floating_point:
        return tensor
    return tensor.to(dtype)


def lora_init(name: str, shape: tuple[int, ...], seed: int) -> Tensor:
    """The starting value of LoRA parameter `name` (named as in the transformers model), peft's
    default init (Hu et al. 2021, arXiv 2106.09685), so the adapter starts as the identity
    update: a linear's A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (Kaiming-uniform, `nn.Linear`'s
    default) and B = 0; an embedding's A = 0 and B ~ N(0, 1). The random values come from a
    generator seeded by (seed, name): any process builds any parameter's value alone, so a
    model built on the meta device and sharded starts where the one-process model starts."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    if ".lora_B." in name or ".lora_embedding_A." in name:
        return torch.zeros(shape)
    if ".lora_embedding_B." in name:
        return torch.randn(shape, generator=g)
    if ".lora_A." in name and len(shape) == 2:
        bound = 1.0 / math.sqrt(shape[1])
        return torch.empty(shape).uniform_(-bound, bound, generator=g)
    raise PracticumError(f"cannot initialise LoRA parameter {name} {tuple(shape)}")


def init_adapter(lm: torch.nn.Module, seed: int) -> None:
    """Set every LoRA parameter of `lm` to `lora_init`'s value."""
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if "lora_" in name:
                p.copy_(lora_init(name, tuple(p.shape), seed))


def _enable_checkpointing(lm) -> None:
    # Non-reentrant checkpointing works with frozen embeddings (LoRA) without input-grad hooks.
    if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5.2x name
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def prompt_runs(input_ids: Tensor, mask: Tensor, min_shared: int) -> list[tuple[int, int]]:
    """Contiguous row ranges [a, b) that share a prompt, when a micro-batch holds rows of
    several groups (rows come group by group); [(0, B)] unless running the ranges one by one,
    each shared prefix once, processes fewer positions than the whole batch does.

    Rows i and i + 1 fall in different ranges when their common prefix is under half of a
    neighbouring pair's (i - 1, i or i + 1, i + 2): at a boundary between groups the rows share
    only the system prompt, far less than a group's rows share, while rows of one group with
    different self-improvement prompts still share most of theirs."""
    rows, width = input_ids.shape
    if rows < 2:
        return [(0, rows)]
    same = (input_ids[1:] == input_ids[:-1]) & (mask[1:] * mask[:-1]).bool()
    common = same.long().cumprod(dim=1).sum(dim=1).cpu().tolist()  # row i vs row i + 1
    cuts = [i + 1 for i, c in enumerate(common) if 2 * c < max(common[max(0, i - 1) : i + 2])]
    bounds = [0, *cuts, rows]
    runs = list(zip(bounds[:-1], bounds[1:]))

    def positions_run(a: int, b: int) -> int:  # the prefix once, then every row's rest
        n = _shared_prefix(input_ids[a:b], mask[a:b]) if b - a > 1 else 0
        n = n if n >= min_shared else 0
        return n + (b - a) * (width - n)

    if len(runs) > 1 and sum(positions_run(a, b) for a, b in runs) < positions_run(0, rows):
        return runs
    return [(0, rows)]


def packed_hidden(lm, input_ids: Tensor, mask: Tensor) -> Tensor:
    """The backbone's last hidden states [N, H] of the real tokens of rows [B, T] (any padding
    side, real tokens contiguous), in row-major order (`_flat_index`), the rows run as one
    packed sequence with their own position ids and attention (`packed_attention`)."""
    use_segment_attention(lm)
    real = mask.bool()
    lengths = real.sum(dim=1)
    lengths = lengths[lengths > 0].tolist()
    ids, pos = input_ids[real][None], positions(mask)[real][None]
    return Logits.hidden(lm, ids, None, pos, **packed_layout(lengths, ids.device))[0]


def _flat_index(mask: Tensor) -> Tensor:
    """[B, T]: the index of each real token in the row-major list of real tokens
    (`packed_hidden`'s order); padding gets its neighbour's, never read."""
    return (mask.bool().flatten().long().cumsum(0) - 1).clamp(min=0).view(mask.shape)


def _shared_prefix(input_ids: Tensor, mask: Tensor) -> int:
    """Length of the longest prefix of real (unpadded) tokens that every row shares, leaving at
    least one position after it."""
    same = (input_ids == input_ids[:1]).all(dim=0) & mask.bool().all(dim=0)
    return min(int(same.long().cumprod(dim=0).sum()), input_ids.shape[1] - 1)


def _logp_entropy(z: Tensor, targets: Tensor, with_entropy: bool) -> tuple[Tensor, Tensor]:
    """log softmax(z)[target] and the entropy of softmax(z) (no gradient; zeros unless
    with_entropy); z [..., V], targets [...]. Logits of -inf (masked tokens) have probability 0
    and add nothing to the entropy."""
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets[..., None]).squeeze(-1) - lse
    if not with_entropy:
        return logp, torch.zeros_like(logp)
    with torch.no_grad():
        zd, lse_d = z.detach(), lse.detach()
        p_z = torch.exp(zd - lse_d[..., None]) * zd.clamp(min=torch.finfo(zd.dtype).min)
        return logp, lse_d - p_z.sum(-1)
