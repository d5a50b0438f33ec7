"""Attention over packed rows: several sequences laid end to end in one row, none seeing another.

Packing ("remove padding", as verl and prime-rl train) runs a micro-batch of rows of different
lengths as one sequence [1, N] of their real tokens, with position ids restarting at 0 in each
row. Attention must then stay inside each row. The rows' boundaries travel as transformers'
variable-length keywords (`cu_seq_lens_q` / `cu_seq_lens_k`: cumulative lengths [0, n0,
n0 + n1, ...], and `max_length_q` / `max_length_k`), from the model's forward down to each
attention call, also when gradient checkpointing recomputes a layer:

    segment_attention(module, q, k, v, mask, scaling=..., cu_seq_lens_q=cu, ...)
        CUDA, bf16 / fp16, flash-attn installed: flash_attn_varlen_func (one kernel, causal
            per segment)
        elsewhere: causal scaled-dot-product attention per segment (a loop over rows)

Neither builds a mask over the packed length: the work and memory of attention are the rows'
own, never N x N. A call without boundaries (sampling with a KV cache, an unpacked batch) goes to
the model's own kernel unchanged, so the same model serves both.

`use_segment_attention(lm)` registers this function in transformers' `AttentionInterface`, under
the name "segments_<kernel>" (kernel: the model's attn_implementation), with a mask function
that builds no mask for packed calls (they pass attention_mask=None), and switches `lm` to it.
Sequence parallelism wraps this same function (one seam).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PREFIX = "segments_"


def segment_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: Tensor | None = None,
    cu_seq_lens_k: Tensor | None = None,
    max_length_q: int | None = None,
    max_length_k: int | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """Causal attention inside each packed segment (module doc).

    query [1, Hq, N, D], key / value [1, Hkv, N, D] (Hq a multiple of Hkv: grouped-query
    attention); cu_seq_lens_q = cu_seq_lens_k: [S + 1] int, 0 first and N last. Returns
    ([1, N, Hq, D], None), as transformers' attention functions do. Without boundaries the
    model's own kernel runs (`use_segment_attention`)."""
    if cu_seq_lens_q is None:
        return base_attention(module)(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"segment_attention: packed rows come as one row, got {query.shape[0]}")
    if cu_seq_lens_k is not None and not torch.equal(cu_seq_lens_k, cu_seq_lens_q):
        raise ValueError(
            "segment_attention: each segment attends to itself only "
            "(cu_seq_lens_k must equal cu_seq_lens_q)"
        )
    if (
        query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and flash_attn_installed()
    ):  # flash-attn computes in half precision only
        return _flash_varlen(query, key, value, cu_seq_lens_q, max_length_q, dropout, scaling)
    bounds = cu_seq_lens_q.tolist()
    out = torch.empty_like(query)
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[:, :, a:b] = F.scaled_dot_product_attention(
            query[:, :, a:b],
            key[:, :, a:b],
            value[:, :, a:b],
            dropout_p=dropout,
            is_causal=True,
            scale=scaling,
            enable_gqa=key.shape[1] != query.shape[1],
        )
    return out.transpose(1, 2).contiguous(), None


def _flash_varlen(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    cu: Tensor,
    max_len: int | None,
    dropout: float,
    scaling: float | None,
) -> tuple[Tensor, None]:
    """flash-attn's variable-length kernel over the packed segments (Dao 2023, FlashAttention-2):
    grouped-query heads natively, causal within each segment. Written for CUDA with flash-attn;
    not run on the CPU machines of CI."""
    from flash_attn import flash_attn_varlen_func

    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [N, H, D]
    cu = cu.to(device=q.device, dtype=torch.int32)
    n = int(max_len) if max_len is not None else int((cu[1:] - cu[:-1]).max())
    out = flash_attn_varlen_func(
        q, k, v, cu, cu, n, n, dropout_p=dropout, softmax_scale=scaling, causal=True
    )
    return out[None], None


def flash_attn_installed() -> bool:
    from transformers.utils import is_flash_attn_2_available

    return is_flash_attn_2_available()


def base_attention(module: nn.Module) -> Callable:
    """The attention function `module`'s model ran before `use_segment_attention` (its
    config names it after PREFIX); eager: the model's own module-level function."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    base = module.config._attn_implementation.removeprefix(PREFIX)
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    return ALL_ATTENTION_FUNCTIONS.get_interface(base, eager)


def _mask_without_packed(base_mask: Callable) -> Callable:
    """The kernel's mask function, except for packed calls (no 2-D mask given): no mask, the
    boundaries do its work."""

    def mask(*args, attention_mask: Tensor | None = None, **kwargs):
        if attention_mask is None:
            return None
        return base_mask(*args, attention_mask=attention_mask, **kwargs)

    return mask


def use_segment_attention(lm: nn.Module) -> None:
    """Switch the transformers model `lm` to `segment_attention` over its current kernel (module
    doc); idempotent. Calls without boundaries run exactly as before."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    current = lm.config._attn_implementation
    if current.startswith(PREFIX):
        return
    name = PREFIX + current
    if name not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(name, segment_attention)
        AttentionMaskInterface.register(
            name, _mask_without_packed(ALL_MASK_ATTENTION_FUNCTIONS[current])
        )
    lm.set_attn_implementation(name)


def packed_layout(lengths: list[int], device: torch.device | str) -> dict[str, Tensor | int]:
    """The keywords that carry packed rows' boundaries to `segment_attention` for rows of
    `lengths` tokens laid end to end."""
    cu = torch.tensor([0, *lengths], device=device).cumsum(0).to(torch.int32)
    longest = max(lengths)
    return {
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }
