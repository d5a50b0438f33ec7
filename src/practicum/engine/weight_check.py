"""The post-sync check (`engine.verify_weights`): after a sampler loads a version of full
weights, every tensor it computes with is compared with the one the learner published, so a
tensor that silently stays stale is caught: a tied copy the loader did not refresh, a renamed
tensor the loader skipped, a slice left unwritten.

    sent = fingerprints(update.tensors, engine_dtype)    # the publishing side
    held = combine_ranks([...])                          # the engine's side, per worker
    problems = stale_tensors(sent, held, packed)         # [] when every tensor arrived

Fingerprint: the sum of a tensor's bit patterns read as integers (int16 for bf16, int32 for
fp32), in int64. It is exact (no rounding: the same values give the same sum, and a changed
element changes it unless changes cancel exactly) and additive, so it survives the two ways an
engine lays tensors out differently: a fused parameter (vLLM's qkv_proj holds q, k and v one
after another) has the sum of its parts, and a parameter sharded over tensor-parallel workers
has the sum of its shards. Zero padding adds nothing; -0.0 is read as +0.0 on both sides (a
matmul through the identity, how a CPU kernel's packed copy is read back, cannot tell them
apart). The publishing side casts each tensor to the engine's dtype first (round to nearest
even, as the engine's own copy does).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHUNK = 1 << 24
"""Elements read at a time: the int64 copy of a chunk is 128 MiB at most."""


class StaleWeights(RuntimeError):
    """The engine holds tensors other than the ones just published (a bug in the weight path,
    not in the user's input: it keeps its traceback)."""


def fingerprint(t: Tensor) -> int:
    """Sum of the bit patterns of `t`'s elements as signed integers, -0.0 read as +0.0."""
    flat = t.detach().reshape(-1)
    total = 0
    for start in range(0, flat.numel(), _CHUNK):
        part = flat[start : start + _CHUNK]
        if part.is_floating_point():
            part = part + 0.0  # -0.0 + 0.0 = +0.0; every other value is unchanged
        bits = part.contiguous().view(_BITS[part.element_size()])
        total += int(bits.to(torch.int64).sum())
    return total


def fingerprints(tensors: Mapping[str, Tensor], dtype: torch.dtype) -> dict[str, int]:
    """Each tensor's fingerprint once cast to `dtype` (floating tensors; one cast at a time)."""
    return {
        name: fingerprint(t.to(dtype) if t.is_floating_point() else t)
        for name, t in tensors.items()
    }


def engine_name(name: str, packed: Mapping[str, Sequence[str]]) -> str:
    """The engine's parameter that holds checkpoint tensor `name`: a module named in one of
    `packed`'s lists (vLLM's `packed_modules_mapping`, e.g. q_proj) is part of the fused one
    (qkv_proj)."""
    fused = {part: whole for whole, parts in packed.items() for part in parts}
    return ".".join(fused.get(p, p) for p in name.split("."))


def combine_ranks(per_rank: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """One fingerprint per parameter from every tensor-parallel worker's: a parameter whose
    fingerprint is the same on every worker is replicated (counted once); one that differs is
    sharded (its shards add up)."""
    out: dict[str, int] = {}
    for name in per_rank[0]:
        values = [r[name] for r in per_rank]
        out[name] = values[0] if len(set(values)) == 1 else sum(values)
    return out


def stale_tensors(
    sent: Mapping[str, int], held: Mapping[str, int], packed: Mapping[str, Sequence[str]]
) -> list[str]:
    """What the engine holds that differs from what was sent, one line per parameter: a sent
    tensor with no parameter to land in, a parameter no sent tensor wrote (so it kept its old
    value), or a parameter whose fingerprint is not the sum of the tensors sent into it."""
    expected: dict[str, int] = defaultdict(int)
    sources: dict[str, list[str]] = defaultdict(list)
    for name, value in sent.items():
        target = engine_name(name, packed)
        expected[target] += value
        sources[target].append(name)
    problems = [
        f"{n}: sent, but the engine has no such parameter" for n in expected if n not in held
    ]
    problems += [
        f"{n}: nothing was sent into it (it kept its old value)" for n in held if n not in expected
    ]
    problems += [
        f"{n}: differs from what was sent ({', '.join(sources[n])})"
        for n in expected
        if n in held and held[n] != expected[n]
    ]
    return problems
