"""The Hugging Face transformers policy: the engine that samples and the model the learner trains.

One object, one set of weights: `Policy.generate` samples token ids with their behaviour
log-probs (KV-cached loop, left padding, per-row stops), `Policy.token_logprobs` recomputes
log-probs differentiably for the learner, and `Policy.frozen_base` disables the LoRA adapter to
give the reference model without a second copy in memory.

Both paths compute logits the same way: the backbone's last hidden state times the output
embedding in fp32. For a bf16 model this removes the bf16 rounding of the logits themselves
(on SmolLM2-135M about 0.02 of mean absolute log-prob error against an fp32 model).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from practicum.engine.base import Sample, SamplingParams
from practicum.engine.device import auto_dtype, configure_threads
from practicum.engine.merged import MergedSampler
from practicum.engine.models import DEFAULT_MODEL, resolve_model
from practicum.engine.sampling import check_params, left_pad, positions, sample_next

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_META = "policy.json"
_LLAMA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class PolicyConfig:
    """How to build a `Policy`."""

    model: str = DEFAULT_MODEL
    """Model spec for `resolve_model`: built-in name, local HF folder or locally cached hub id."""
    dtype: str = "auto"
    """Weight dtype: "float32", "bfloat16", or "auto": bf16 when the hardware computes it natively
    (CPU with avx512_bf16/AMX, or a CUDA GPU with bf16) and LoRA is on, else fp32. Full
    fine-tuning stays fp32 under "auto": AdamW on bf16 weights loses updates below 2^-8 relative."""
    device: str = "auto"
    """"cpu", "cuda", "cuda:1", ... or "auto" (cuda when available, else cpu)."""
    lora: bool = True
    """Train a LoRA adapter (peft) on frozen base weights; False trains every parameter."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scale numerator: the adapter's update is scaled by alpha / r."""
    lora_dropout: float = 0.0
    """Dropout on the adapter's input while training (never while sampling)."""
    lora_target_modules: list[str] = field(default_factory=lambda: list(_LLAMA_LINEARS))
    """Names of the linear layers that get an adapter."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, ~30% more learner time."""
    merged_sampling: bool = True
    """With LoRA, sample from a copy of the model with the adapter merged into its weights
    (engine/merged.py): 7-21% faster sampling on CPU for one more copy of the model."""
    seed: int = 0
    """Seed of the adapter's random initialisation."""

    def __post_init__(self) -> None:
        if self.dtype != "auto" and self.dtype not in _DTYPES:
            raise ValueError(
                f"PolicyConfig.dtype: expected auto, {', '.join(_DTYPES)}; got {self.dtype!r}"
            )
        if self.lora and self.lora_r < 1:
            raise ValueError(f"PolicyConfig.lora_r: expected an integer >= 1, got {self.lora_r}")
        if self.lora and "lm_head" in self.lora_target_modules:
            raise ValueError(
                "PolicyConfig.lora_target_modules: lm_head is not supported (the output "
                "projection runs in fp32 from the base weights); train it with lora=False"
            )


class Policy:
    """A causal LM that samples (implements `practicum.engine.base.Engine`) and is trained.

    `model` stays in train mode (gradient checkpointing and LoRA dropout act only there);
    `generate` and no-grad `token_logprobs` switch to eval mode while they run.
    Not thread-safe: one caller at a time.
    """

    def __init__(self, cfg: PolicyConfig | None = None) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg = cfg or PolicyConfig()
        configure_threads()
        self.path = resolve_model(cfg.model)
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
        )
        self.dtype = (
            _DTYPES[cfg.dtype] if cfg.dtype != "auto" else auto_dtype(self.device, cfg.lora)
        )
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        lm = AutoModelForCausalLM.from_pretrained(self.path, dtype=self.dtype).to(self.device)
        if cfg.gradient_checkpointing:
            _enable_checkpointing(lm)
        torch.manual_seed(cfg.seed)
        if cfg.lora:
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
        else:
            self.model = lm.requires_grad_(True)
        self.model.train()
        self._lm = lm  # the transformers CausalLM (adapter layers are injected in place)
        self._fp32_head = not any(
            getattr(lm.config, k, None) for k in ("final_logit_softcapping", "logit_scale")
        )
        self._head32: tuple[tuple[int, int], Tensor] | None = None
        self._sampler = (
            MergedSampler(self.model, self.path, self.dtype, self.device)
            if cfg.lora and cfg.merged_sampling
            else None
        )
        self._adapter_off = False
        self.eos_ids = _eos_ids(self.tokenizer, lm)
        self.pad_id = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else min(self.eos_ids)
        )
        self.version = 0

    # -- learner side -------------------------------------------------------------------------
    logit_chunk_rows = 2048
    """token_logprobs computes [B, T, V] logits at most this many (batch x position) rows at a
    time; under grad each chunk is recomputed in backward instead of kept, so logit memory
    stays O(rows x V) rather than O(B x T x V) (SmolLM2, 8 x 512 tokens, bf16: peak 10.9 ->
    8.9 GB, no slower)."""

    def token_logprobs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        temperature: float = 1.0,
        return_entropy: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Per-token log-probs  logp[b, t] = log softmax(z[b, t-1] / T)[x[b, t]]  (differentiable).

        input_ids, attention_mask: [B, T], any padding side. Returns [B, T] fp32; position 0,
        padding, and the first token after left padding (no real prefix) get 0. With
        return_entropy also the entropy of the same distributions, [B, T], zeroed likewise.
        Without grad the model runs in eval mode (no dropout), so old/reference log-probs are
        deterministic.
        """
        if temperature <= 0:
            raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
        input_ids = input_ids.to(self.device)
        mask = attention_mask.to(self.device)
        targets = input_ids[:, 1:]
        with self._eval_mode(not torch.is_grad_enabled()):
            if self._fp32_head:
                hidden = self._hidden(input_ids, mask, positions(mask))[:, :-1]
                step = max(1, self.logit_chunk_rows // max(1, hidden.shape[0]))
                parts = [
                    self._chunk_stats(hidden[:, a:a + step], targets[:, a:a + step], temperature,
                                      return_entropy)
                    for a in range(0, hidden.shape[1], step)
                ]
                logp = torch.cat([lp for lp, _ in parts], dim=1)
                entropy = torch.cat([en for _, en in parts], dim=1)
            else:
                z = self._logits(input_ids, mask, positions(mask))[:, :-1]
                logp, entropy = _logp_entropy(z / temperature, targets, return_entropy)
        valid = (mask[:, 1:] * mask[:, :-1]).bool()
        zero = logp.new_zeros(logp.shape[0], 1)
        logp = torch.cat([zero, logp.masked_fill(~valid, 0.0)], dim=1)
        if not return_entropy:
            return logp
        return logp, torch.cat([zero, entropy.masked_fill(~valid, 0.0)], dim=1)

    def _chunk_stats(self, hidden: Tensor, targets: Tensor, temperature: float,
                     with_entropy: bool) -> tuple[Tensor, Tensor]:
        """(log-prob of targets, entropy) for a chunk of hidden states; logits not kept."""
        def stats(h: Tensor) -> tuple[Tensor, Tensor]:
            return _logp_entropy(self._head(h) / temperature, targets, with_entropy)

        if torch.is_grad_enabled() and hidden.requires_grad:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(stats, hidden, use_reentrant=False)
        return stats(hidden)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @contextmanager
    def frozen_base(self) -> Iterator[Policy]:
        """Within the block this policy *is* the frozen base model (adapter disabled).

        `with policy.frozen_base() as ref: ref.token_logprobs(...)` gives reference log-probs
        without a second copy of the weights.
        """
        if not self.cfg.lora:
            raise RuntimeError(
                "frozen_base needs lora=True: with full fine-tuning the base weights themselves "
                "are trained, so a reference model needs its own copy, e.g. a second "
                "Policy(PolicyConfig(model=..., lora=False)) that is never stepped"
            )
        with self.model.disable_adapter():
            self._adapter_off = True
            try:
                yield self
            finally:
                self._adapter_off = False

    def bump_version(self) -> int:
        self.version += 1
        return self.version

    def save(self, path: Path) -> None:
        """Write adapter (or full weights), tokenizer and version to `path` (atomic replace).

        A LoRA folder is a standard peft adapter (loadable by vLLM's LoRARequest); a full one is
        a standard HF model folder (usable as PolicyConfig.model).
        """
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        meta = {"version": self.version, "lora": self.cfg.lora, "model": self.cfg.model}
        (tmp / _META).write_text(json.dumps(meta, indent=1))
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)

    def load_weights(self, path: Path) -> None:
        """Load weights written by `save` into this policy in place, and take their version."""
        from peft import load_peft_weights, set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / _META).is_file():
            raise FileNotFoundError(f"{path} is not a saved policy (no {_META})")
        meta = json.loads((path / _META).read_text())
        if meta["lora"] != self.cfg.lora:
            raise ValueError(
                f"{path} holds lora={meta['lora']} weights, this policy has lora={self.cfg.lora}"
            )
        if self.cfg.lora:
            result = set_peft_model_state_dict(
                self.model, load_peft_weights(str(path), device=str(self.device))
            )
            unexpected = result.unexpected_keys
        else:
            state: dict[str, Tensor] = {}
            for f in sorted(path.glob("*.safetensors")):
                state.update(load_file(f, device=str(self.device)))
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            tied = {"lm_head.weight"} if self._lm.config.tie_word_embeddings else set()
            if set(missing) - tied:
                raise ValueError(f"{path} lacks weights for {sorted(set(missing) - tied)[:5]}")
        if unexpected:
            raise ValueError(
                f"{path} has weights this policy does not know: {sorted(unexpected)[:5]}"
            )
        self.version = int(meta["version"])

    # -- engine side --------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        """Sample one continuation per prompt (see `Engine.generate`).

        Log-probs are log_softmax(logits / T) of the sampled token in fp32; top-p truncation is
        not reflected in them, and greedy (T = 0) reports T = 1 log-probs. A sequence stops after
        an eos/stop id (kept) or after the token that completes a stop string (kept, nothing
        after it). With params.seed, row i draws from its own generator seeded seed + i.
        """
        check_params(params)
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"generate: prompt {i} is empty")
        limit = getattr(self._lm.config, "max_position_embeddings", None)
        longest = max((len(p) for p in prompts), default=0)
        if limit and longest + params.max_new_tokens > limit:
            raise ValueError(
                f"generate: a {longest}-token prompt plus max_new_tokens={params.max_new_tokens} "
                f"exceeds the model's {limit} positions"
            )
        if not prompts or params.max_new_tokens == 0:
            return [Sample([], [], "", "length") for _ in prompts]
        with self._eval_mode(True):
            ids, lps, reasons = self._sample_loop(prompts, params)
        return [
            Sample(i, lp, self.tokenizer.decode(i, skip_special_tokens=True), r)
            for i, lp, r in zip(ids, lps, reasons)
        ]

    def _sample_loop(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]], list[str]]:
        from transformers import DynamicCache

        n = len(prompts)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lps: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n
        stop_ids = self.eos_ids | set(params.stop_token_ids)
        gens = None
        if params.seed is not None:
            gens = [torch.Generator(self.device).manual_seed(params.seed + i) for i in range(n)]

        ids, mask = left_pad(prompts, self.pad_id, self.device)
        pos = positions(mask)
        cache = DynamicCache(config=self._lm.config)
        lm = self._sampling_model()
        logits = self._logits(ids, mask, pos, cache, last_only=True, lm=lm)[:, -1]
        rows = list(range(n))  # original index of each still-running row
        for _ in range(params.max_new_tokens):
            row_gens = [gens[i] for i in rows] if gens is not None else None
            tok, lp = sample_next(logits, params.temperature, params.top_p, row_gens)
            keep = []
            for j, (i, t, l) in enumerate(zip(rows, tok.tolist(), lp.tolist())):
                out_ids[i].append(t)
                out_lps[i].append(l)
                if t in stop_ids or self._hit_stop_string(out_ids[i], params.stop_strings):
                    reasons[i] = "stop"
                elif len(out_ids[i]) < params.max_new_tokens:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(rows):  # finished rows leave the batch and the KV cache
                sel = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(sel)
                tok, mask, pos = tok[sel], mask[sel], pos[sel]
                rows = [rows[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
            pos = pos[:, -1:] + 1
            logits = self._logits(tok[:, None], mask, pos, cache, last_only=True, lm=lm)[:, -1]
        return out_ids, out_lps, reasons

    def _sampling_model(self):
        """The merged copy when it applies (LoRA on and enabled), else the training model."""
        if self._sampler is None or self._adapter_off:
            return self._lm
        with torch.inference_mode(False):
            self._sampler.refresh()
        return self._sampler.lm

    def _hit_stop_string(self, ids: list[int], stops: list[str]) -> bool:
        # Earlier tokens cannot have completed a stop string (we would have stopped), so any
        # match now was completed by the latest token.
        if not stops:
            return False
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return any(s in text for s in stops)

    # -- shared -------------------------------------------------------------------------------
    def _logits(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        cache=None,
        last_only: bool = False,
        lm=None,
    ) -> Tensor:
        """fp32 logits [B, T or 1, V]; the output projection runs in fp32 on the hidden states.

        `lm`: the transformers model whose backbone runs (default: the training model); the
        output projection is always the training model's (LoRA never targets it here)."""
        lm = self._lm if lm is None else lm
        if not self._fp32_head:  # model-specific logit post-processing: use the model's own head
            return lm(**_model_inputs(input_ids, attention_mask, position_ids, cache),
                      logits_to_keep=1 if last_only else 0).logits.float()
        hidden = self._hidden(input_ids, attention_mask, position_ids, cache, lm)
        return self._head(hidden[:, -1:] if last_only else hidden)

    def _hidden(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
                cache=None, lm=None) -> Tensor:
        """The backbone's last hidden states [B, T, H] (model dtype)."""
        inputs = _model_inputs(input_ids, attention_mask, position_ids, cache)
        return (self._lm if lm is None else lm).base_model(**inputs).last_hidden_state

    def _head(self, hidden: Tensor) -> Tensor:
        """The output projection in fp32: hidden [..., H] -> logits [..., V]."""
        head = self._lm.get_output_embeddings()
        bias = None if head.bias is None else head.bias.float()
        return F.linear(hidden.float(), self._head_weight_fp32(head.weight), bias)

    def _head_weight_fp32(self, w: Tensor) -> Tensor:
        if w.dtype == torch.float32 or (w.requires_grad and torch.is_grad_enabled()):
            return w.float()
        key = (w.data_ptr(), w._version)  # _version moves on every in-place update
        if self._head32 is None or self._head32[0] != key:
            with torch.inference_mode(False), torch.no_grad():
                self._head32 = (key, w.detach().float())
        return self._head32[1]

    @contextmanager
    def _eval_mode(self, on: bool) -> Iterator[None]:
        was_training = self.model.training
        if on:
            self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)


def _enable_checkpointing(lm) -> None:
    # Non-reentrant checkpointing works with frozen embeddings (LoRA) without input-grad hooks.
    if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5.2x name
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _eos_ids(tokenizer, lm) -> set[int]:
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    gen_eos = getattr(getattr(lm, "generation_config", None), "eos_token_id", None)
    ids.update([gen_eos] if isinstance(gen_eos, int) else (gen_eos or []))
    return ids


def _model_inputs(input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor, cache) -> dict:
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "past_key_values": cache,
        "use_cache": cache is not None,
    }


def _logp_entropy(z: Tensor, targets: Tensor, with_entropy: bool) -> tuple[Tensor, Tensor]:
    """log softmax(z)[target] and the entropy of softmax(z) (zeros unless with_entropy);
    z [B, T, V], targets [B, T]."""
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets[..., None]).squeeze(-1) - lse
    if not with_entropy:
        return logp, torch.zeros_like(logp)
    return logp, lse - (torch.softmax(z, dim=-1) * z).sum(-1)
