"""A policy written as the folder `HFTrainable.save` writes, one tensor at a time.

    LoRA:  adapter_config.json, adapter_model.safetensors           (a peft adapter)
    full:  config.json, generation_config.json, model.safetensors   (a HF model; or
           model-00001-of-0000N.safetensors ... + model.safetensors.index.json)
    both:  the tokenizer's files and practicum's policy.json

The weights come from `iter_full_tensors` (the sharded learner's: every rank gathers each
weight in turn, in the compute dtype, and rank 0 writes) and each is appended to its file
(`tensor_files.StreamWriter`) and let go: the writer holds one full tensor at a time, and the
folder loads with transformers, peft, vLLM and `HFTrainable.load_weights` like the one-process
learner's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from practicum.engine.hf_trainable import (
    HFTrainable,
    distinct_tensors,
    replaced_folder,
    write_policy_meta,
)
from practicum.learner.tensor_files import Planned, StreamWriter

SAVE_FILE_BYTES = 5 * 1024**3
"""The most bytes of weights in one safetensors file of a saved full model (the Hub's usual)."""


def save_policy_folder(
    inner: HFTrainable,
    path: Path,
    tensors: Iterator[tuple[str, Tensor]],
    dtype: torch.dtype | None,
    max_file_bytes: int = SAVE_FILE_BYTES,
) -> None:
    """Write `inner`'s policy folder to `path` (replaced atomically), its weights taken one at a
    time from `tensors`: `iter_full_tensors(dtype)`'s full tensors (floating ones in `dtype`;
    None: their own), in the order and under the names of `inner.trainable_state()`."""
    plan = [
        Planned(name, _saved_dtype(t, dtype), tuple(t.shape))
        for name, t in distinct_tensors(inner.trainable_state())[0].items()
    ]
    lora = inner.cfg.lora
    with replaced_folder(path) as tmp:
        with StreamWriter(
            tmp, "adapter_model" if lora else "model", plan, math.inf if lora else max_file_bytes
        ) as writer:
            for name, tensor in tensors:
                writer.write(name, tensor)
            writer.close()
        if lora:
            adapter = copy.deepcopy(inner.model.peft_config["default"])
            adapter.inference_mode = True  # as peft's save_pretrained writes it
            adapter.save_pretrained(tmp)
        else:
            config = copy.deepcopy(inner.lm.config)
            config.architectures = [type(inner.lm).__name__]
            config.dtype = plan[0].dtype if dtype is None else dtype
            config.save_pretrained(tmp)
            if inner.lm.can_generate():
                inner.lm.generation_config.save_pretrained(tmp)
        inner.tokenizer.save_pretrained(tmp)
        write_policy_meta(tmp, inner.cfg)


def _saved_dtype(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
