"""Building the sharded learner's model without any process holding all of it
(`practicum.learner.sharded.sharded_trainable` runs these steps).

1. The model (and, for full fine-tuning with a KL term, its frozen reference) is built on the
   meta device: shapes, no storage (`accelerate.init_empty_weights(include_buffers=False)`, so
   the rotary tables and other buffers are computed as usual); LoRA is injected (peft) and each
   decoder layer and the root are `fully_shard`ed, all still without storage.
2. `to_empty` gives each rank storage for its shards only; the buffers get their values back.
3. Rank 0 reads the model's safetensors files one tensor at a time (`TensorFiles`) and scatters
   each tensor's rows (`rows.scatter_rows`): every rank receives just its shard. No process
   ever holds more than one full tensor, and only rank 0 opens a weight file. The LoRA adapter needs
   no file: every rank computes its values from the seed (`hf_trainable.lora_init`), as the
   one-process model does.

A saved policy (`model.init`, or a policy folder) loads the same way (`load_policy_folder`).

Precision: the weights are stored in `resolve_dtype`'s dtype (auto: bf16 for LoRA where the
hardware computes it, fp32 for full fine-tuning: AdamW's master copy). On a GPU, full
fine-tuning computes in bf16 (FSDP2 gathers bf16 copies, reduces gradients in fp32) and keeps its
frozen reference in bf16 from the start; LoRA computes in the stored dtype, the adapter in fp32
as in one process. On a CPU nothing is cast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor

from practicum.engine.hf_model import pick_device
from practicum.engine.hf_trainable import (
    HFTrainable,
    check_policy_folder,
    distinct_tensors,
    lora_init,
)
from practicum.errors import PracticumError
from practicum.learner.shards import broadcast, copy_rows, scatter_rows
from practicum.learner.tensor_files import TensorFiles


@dataclass
class BuiltReference:
    """The frozen reference of full fine-tuning, already built and sharded (in
    `HFTrainable.reference`'s place, where a `FrozenReference` would load it whole)."""

    lm: nn.Module | None


def rank_device(spec: str) -> torch.device:
    """model.device for this rank: on CUDA, the GPU of its LOCAL_RANK (torchrun, the Ray group)."""
    device = pick_device(spec)
    if device.type != "cuda":
        return device
    index = int(os.environ.get("LOCAL_RANK", device.index or 0))
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def mixed_precision(device: torch.device, lora: bool) -> MixedPrecisionPolicy:
    """On a GPU: full fine-tuning gathers bf16 copies of its fp32 weights, gradients are reduced
    in fp32; LoRA computes in its stored dtype (module doc). On a CPU nothing is cast."""
    if device.type != "cuda":
        return MixedPrecisionPolicy()
    bf16 = torch.cuda.is_bf16_supported()
    return MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if bf16 and not lora else None, reduce_dtype=torch.float32
    )


def empty_lm(
    path, dtype: torch.dtype, attn_implementation: str, rope_scaling: dict | None = None
) -> nn.Module:
    """The transformers CausalLM of folder `path` with its parameters on the meta device (its
    buffers computed: the rotary tables under `rope_scaling` too, `practicum.engine.rope`),
    tied weights tied, its generation config read as `from_pretrained` does."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM, GenerationConfig

    from practicum.engine.rope import model_config

    config = model_config(path, rope_scaling)
    with init_empty_weights(include_buffers=False):
        lm = AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation=attn_implementation
        )
    lm.tie_weights()  # not done on the meta device
    if (Path(path) / "generation_config.json").is_file():
        lm.generation_config = GenerationConfig.from_pretrained(path)
    return lm


def materialise(roots: list[nn.Module], device: torch.device) -> None:
    """Storage on `device` for each rank's shards (`to_empty`); the buffers, which were built
    with values and would come back uninitialised, keep them."""
    for root in roots:
        saved = {n: b.detach().clone() for n, b in root.named_buffers(remove_duplicate=False)}
        root.to_empty(device=device)
        with torch.no_grad():
            for name, b in root.named_buffers(remove_duplicate=False):
                b.copy_(saved[name])


def load_base_weights(path: Path, models: list[nn.Module], seed: int) -> None:
    """Every rank: the weights of each sharded model in `models` (a policy, its reference) from
    the HF model folder `path`, read once by rank 0; LoRA's adapter from `seed` (no file)."""
    targets = [target for lm in models for target in base_targets(lm)]
    fill(targets, *_rank0_files(path), prefix=models[0].base_model_prefix, source=str(path))
    with torch.no_grad():
        for lm in models:
            for name, p in lm.named_parameters():
                if "lora_" in name:
                    copy_rows(p, lora_init(name, tuple(p.shape), seed))


def base_targets(lm: nn.Module) -> list[tuple[str, Tensor]]:
    """(name in the model's files, tensor) for every weight of `lm` a HF model folder holds: each
    tied weight once, LoRA's injected layers skipped and its base layers under their original
    names."""
    state = distinct_tensors(lm.state_dict(keep_vars=True))[0]
    return [
        (name.replace(".base_layer.", "."), t) for name, t in state.items() if "lora_" not in name
    ]


def load_policy_folder(inner: HFTrainable, path: Path) -> None:
    """Every rank: a folder written by `save` (`HFTrainable.save`'s format: a peft adapter, or a
    HF model), read by rank 0 and scattered, into the sharded trainable weights of `inner`;
    refused in one line when it is not this model's kind or lacks, or adds, weights."""
    check_policy_folder(path, inner.cfg.lora)
    state = distinct_tensors(inner.trainable_state())[0]
    fill(list(state.items()), *_rank0_files(path), source=str(path), exact=True)


def _rank0_files(path: Path) -> tuple[TensorFiles | None, str | None]:
    """Rank 0's index of the safetensors files in `path` (None on the other ranks), or why it
    has none."""
    if dist.get_rank() != 0:
        return None, None
    try:
        return TensorFiles.in_folder(path), None
    except (OSError, ValueError) as err:
        return None, str(err)


def fill(
    targets: list[tuple[str, Tensor]],
    files: TensorFiles | None,
    problem: str | None,
    source: str,
    prefix: str = "",
    exact: bool = False,
) -> None:
    """Every rank: the values of `targets` (name, tensor) from `files`, which only rank 0 has
    (None elsewhere). A name shared by several targets (a model and its reference) is read
    once. Rank 0's `problem` (it could not read the files), names missing from the files, or
    (with `exact`) tensors the files add are refused on every rank at once, in one line,
    before anything is filled. `prefix`: a model's `base_model_prefix`, which some files leave
    out of their names."""
    by_name: dict[str, list[Tensor]] = {}
    for name, t in targets:
        by_name.setdefault(name, []).append(t)
    keys = {}
    if files is not None:
        keys = {name: _file_key(files, name, prefix) for name in by_name}
        wrong = _check(files, by_name, keys, exact)
        problem = f"{source}: {wrong}" if wrong else None
    box = [problem]
    dist.broadcast_object_list(box, src=0)
    if box[0]:
        raise PracticumError(box[0])
    with torch.no_grad():
        for name, tensors in by_name.items():
            full = files.read(keys[name]) if files is not None else None
            for t in tensors:
                if isinstance(t, DTensor):
                    scatter_rows(t, full)
                else:
                    broadcast(t, full)


def _file_key(files: TensorFiles, name: str, prefix: str) -> str | None:
    if name in files.entries:
        return name
    if prefix and name.startswith(prefix + ".") and name[len(prefix) + 1 :] in files.entries:
        return name[len(prefix) + 1 :]  # a base model's file (no head): names lack the prefix
    return None


def _check(
    files: TensorFiles, by_name: dict[str, list[Tensor]], keys: dict[str, str | None], exact: bool
) -> str | None:
    missing = [n for n, k in keys.items() if k is None]
    if missing:
        return f"no weights for {missing[:5]} ({len(missing)} missing)"
    wrong = [
        f"{n} {files.entries[keys[n]].shape} vs {tuple(ts[0].shape)}"
        for n, ts in by_name.items()
        if files.entries[keys[n]].shape != tuple(ts[0].shape)
    ]
    if wrong:
        return f"weights of another shape: {wrong[:3]}"
    extra = sorted(set(files.entries) - set(keys.values()))
    if exact and extra:
        return f"weights this model does not know: {extra[:5]}"
    return None
