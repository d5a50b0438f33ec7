"""Loading a Hugging Face causal LM and computing its logits the way both engine halves must.

The sampler (`hf_sampler`) and the trainable (`hf_trainable`) compute logits identically: the
backbone's last hidden state times the output embedding in fp32. For a bf16 model this removes
the bf16 rounding of the logits themselves (on SmolLM2-135M a sizeable share of the
sampler/learner log-prob gap), so behaviour and learner log-probs agree closely.
"""

from __future__ import annotations

import functools
import inspect
import re

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from practicum.engine.device import auto_dtype, configure_threads
from practicum.engine.options import PolicyConfig
from practicum.errors import ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
SKINNY_ROWS = 64
"""Up to this many rows the output projection runs as weight @ hidden.T on CPU (`Logits.head`)."""


def pick_device(spec: str) -> torch.device:
    """The device for model.device (auto: cuda when available, else cpu). A device this machine
    lacks is refused here, in one line, before anything loads."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", spec):
        raise ConfigError(
            f"config error at model.device: expected auto, cpu, cuda or cuda:N; got {spec!r}"
        )
    device = torch.device(spec)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(
                f"config error at model.device: {spec!r}, but this machine has no "
                f"CUDA device (use cpu or auto)"
            )
        if (device.index or 0) >= count:
            raise ConfigError(
                f"config error at model.device: {spec!r}, but this machine has "
                f"{count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    return device


def check_attn_implementation(name: str, device: torch.device) -> None:
    """Refuse an attention kernel that cannot run here, in one line naming the setting."""
    if name not in ATTN_IMPLEMENTATIONS:
        raise ConfigError(
            f"config error at model.attn_implementation: expected "
            f"{', '.join(ATTN_IMPLEMENTATIONS)}; got {name!r}"
        )
    if name != "flash_attention_2":
        return
    from transformers.utils import is_flash_attn_2_available

    if torch.device(device).type != "cuda":
        raise ConfigError(
            f"config error at model.attn_implementation: flash_attention_2 runs on "
            f"a CUDA GPU, not on {device} (use sdpa)"
        )
    if not is_flash_attn_2_available():
        raise ConfigError(
            "config error at model.attn_implementation: flash_attention_2 needs "
            "the flash-attn package, which is not installed here (use sdpa)"
        )


def uses_checkpointing(cfg: PolicyConfig, device: torch.device) -> bool:
    """model.gradient_checkpointing, or under None: on a GPU (long rows' activations are what
    fills its memory), off on a CPU."""
    if cfg.gradient_checkpointing is not None:
        return cfg.gradient_checkpointing
    return torch.device(device).type == "cuda"


def load_lm(
    path,
    dtype: torch.dtype,
    device: torch.device,
    attn_implementation: str = "sdpa",
    rope_scaling: dict | None = None,
) -> nn.Module:
    """The causal LM of folder `path`, with `rope_scaling` applied (`practicum.engine.rope`)."""
    from transformers import AutoModelForCausalLM

    from practicum.engine.rope import model_config

    check_attn_implementation(attn_implementation, device)
    configure_threads()
    return AutoModelForCausalLM.from_pretrained(
        path,
        config=model_config(path, rope_scaling),
        dtype=dtype,
        attn_implementation=attn_implementation,
    ).to(device)


def resolve_dtype(cfg: PolicyConfig, device: torch.device, sampler: bool = False) -> torch.dtype:
    """model.dtype, or under "auto" the device's choice (`auto_dtype`); `sampler`: for a
    sampler with weights of its own (bf16 on a GPU for full fine-tuning too)."""
    return DTYPES[cfg.dtype] if cfg.dtype != "auto" else auto_dtype(device, cfg.lora, sampler)


def load_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def eos_ids(tokenizer, lm) -> set[int]:
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    gen_eos = getattr(getattr(lm, "generation_config", None), "eos_token_id", None)
    ids.update([gen_eos] if isinstance(gen_eos, int) else (gen_eos or []))
    return ids


def pad_id(tokenizer, eos: set[int]) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)


def merged_sampling_on(cfg: PolicyConfig, device: torch.device) -> bool:
    """Whether a LoRA policy samples from a merged copy. Unset, only on a CPU, where merging
    speeds sampling up. A merged copy computes x (W + s B A) in one product while the learner
    computes x W in the model's dtype plus the adapter's path: in bf16 the two round
    differently, and where that was measured to widen the trainer/sampler gap (the GPU check's
    model) the sampler runs the learner's own adapter instead, as full fine-tuning does."""
    if not cfg.lora:
        return False
    if cfg.merged_sampling is not None:
        return cfg.merged_sampling
    return device.type == "cpu"


class Logits:
    """Logits of a transformers CausalLM (or of a model sharing its output projection)."""

    def __init__(self, head_owner: nn.Module):
        self.head_owner = head_owner
        """The model whose output embedding is used (LoRA never targets it here)."""
        config = head_owner.config
        self.fp32_head = not any(
            getattr(config, k, None) for k in ("final_logit_softcapping", "logit_scale")
        )
        self._head32: tuple[tuple[int, int], Tensor] | None = None
        self.cache_fp32_head = True
        """Keep the fp32 copy of a bf16 head between calls (keyed by storage and version);
        off for a sharded model, whose gathered weights are refilled in place."""

    def __call__(
        self,
        lm: nn.Module,
        input_ids: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        cache=None,
        last_only: bool = False,
    ) -> Tensor:
        """fp32 logits [B, T or 1, V] from `lm`'s backbone (`lm` = the head owner or a copy)."""
        if not self.fp32_head:  # model-specific logit post-processing: use the model's own head
            return lm(
                **model_inputs(lm, input_ids, attention_mask, position_ids, cache),
                logits_to_keep=1 if last_only else 0,
            ).logits.float()
        hidden = self.hidden(lm, input_ids, attention_mask, position_ids, cache)
        return self.head(hidden[:, -1:] if last_only else hidden)

    @staticmethod
    def hidden(
        lm: nn.Module,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        position_ids: Tensor,
        cache=None,
        **attention: Tensor | int,
    ) -> Tensor:
        """The backbone's last hidden states [B, T, H] (model dtype); `attention`: keywords for
        the attention function (packed rows' boundaries, `packed_attention`)."""
        backbone = lm.base_model
        inputs = model_inputs(backbone, input_ids, attention_mask, position_ids, cache)
        return backbone(**inputs, **attention).last_hidden_state

    def head(self, hidden: Tensor) -> Tensor:
        """The output projection in fp32: hidden [..., H] -> logits [..., V]."""
        head = self.head_owner.get_output_embeddings()
        bias = None if head.bias is None else head.bias.float()
        w = head.weight
        if w.dtype != torch.float32 and (w.requires_grad or not self.cache_fp32_head):
            # no kept fp32 copy (a sharded or trained head): cast block by block, and again in
            # backward, rather than hold a whole fp32 head
            return fp32_linear(hidden, w, bias)
        weight = self._weight_fp32(w)
        rows = hidden.numel() // hidden.shape[-1]
        if hidden.device.type == "cpu" and rows <= SKINNY_ROWS:
            # A decode step: CPU BLAS runs [few, H] x [H, V] through a slow kernel; the same
            # product as [V, H] x [H, few] is several times faster (benchmarks/vs_trl.py).
            flat = hidden.float().reshape(rows, -1)
            logits = (weight @ flat.T).T.contiguous().view(*hidden.shape[:-1], -1)
            return logits if bias is None else logits + bias
        return F.linear(hidden.float(), weight, bias)

    def _weight_fp32(self, w: Tensor) -> Tensor:
        if (
            w.dtype == torch.float32
            or (w.requires_grad and torch.is_grad_enabled())
            or not self.cache_fp32_head
        ):
            return w.float()
        key = (w.data_ptr(), w._version)  # _version moves on every in-place update
        if self._head32 is None or self._head32[0] != key:
            with torch.inference_mode(False), torch.no_grad():
                self._head32 = (key, w.detach().float())
        return self._head32[1]


HEAD_BLOCK_ROWS = 8192
"""Output-embedding rows cast to fp32 at a time by `fp32_linear`."""


class _Fp32Linear(torch.autograd.Function):
    """hidden @ weight.T (+ bias) computed in fp32 for a low-precision weight [V, H], whose fp32
    copy exists one block of HEAD_BLOCK_ROWS rows at a time, in forward and in backward: the
    whole fp32 head (4 V H bytes, the largest single buffer of a big-vocabulary model) is never
    held. The same products as F.linear(hidden.float(), weight.float(), bias), by blocks of V."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(hidden, weight)
        ctx.has_bias = bias is not None
        h = hidden.float()
        out = torch.cat(
            [
                h @ weight[a : a + HEAD_BLOCK_ROWS].float().T
                for a in range(0, weight.shape[0], HEAD_BLOCK_ROWS)
            ],
            dim=-1,
        )
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad: Tensor):
        hidden, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_h = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            acc = torch.zeros(g.shape[0], weight.shape[1], dtype=torch.float32, device=grad.device)
            for a in range(0, weight.shape[0], HEAD_BLOCK_ROWS):
                acc += g[:, a : a + HEAD_BLOCK_ROWS] @ weight[a : a + HEAD_BLOCK_ROWS].float()
            grad_h = acc.view(*hidden.shape[:-1], -1).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            h = hidden.reshape(-1, hidden.shape[-1]).float()
            grad_w = torch.cat(
                [
                    (g[:, a : a + HEAD_BLOCK_ROWS].T @ h).to(weight.dtype)
                    for a in range(0, weight.shape[0], HEAD_BLOCK_ROWS)
                ]
            )
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_h, grad_w, grad_b


def fp32_linear(hidden: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """fp32 logits of a low-precision output projection without a whole fp32 copy of its
    weight (`_Fp32Linear`)."""
    return _Fp32Linear.apply(hidden, weight, bias)


def model_inputs(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor, cache
) -> dict:
    """Keyword arguments of `model`'s forward, the KV cache under the name it takes."""
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        cache_argument(type(model).forward): cache,
        "use_cache": cache is not None,
    }


@functools.cache
def cache_argument(forward) -> str:
    """The KV-cache argument's name: transformers 5.2x calls it `cache` (the old
    `past_key_values` still works but warns on every call); earlier versions know only
    `past_key_values`."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class FrozenReference:
    """The untrained model, for full fine-tuning (where the base weights themselves train):
    loaded on first use and shared by the trainable's KL reference and the sampler's
    adapter-off path. With LoRA the base is the adapter-disabled model and this is unused."""

    def __init__(
        self,
        path,
        dtype: torch.dtype,
        device: torch.device,
        attn_implementation: str = "sdpa",
        rope_scaling: dict | None = None,
    ):
        self.path, self.dtype, self.device = path, dtype, device
        self.attn_implementation, self.rope_scaling = attn_implementation, rope_scaling
        self._lm: nn.Module | None = None

    @property
    def lm(self) -> nn.Module:
        if self._lm is None:
            with torch.inference_mode(False):
                self._lm = (
                    load_lm(
                        self.path,
                        self.dtype,
                        self.device,
                        self.attn_implementation,
                        self.rope_scaling,
                    )
                    .eval()
                    .requires_grad_(False)
                )
        return self._lm
