"""Build the Hugging Face engine: a trainable model and the sampler it publishes weights to.

    trainable, sampler = load_hf_engine(PolicyConfig(model="smollm2-135m-instruct"))

Both halves share one set of base weights in this process; see `hf_trainable` and `hf_sampler`.
"""

from __future__ import annotations

from practicum.engine.device import auto_dtype
from practicum.engine.hf_model import (
    DTYPES,
    FrozenReference,
    PolicyConfig,
    load_lm,
    load_tokenizer,
    pick_device,
    resolve_dtype,
)
from practicum.engine.hf_sampler import HFSampler, MergedCopy
from practicum.engine.hf_trainable import HFTrainable
from practicum.engine.models import resolve_model

__all__ = ["HFSampler", "HFTrainable", "PolicyConfig", "load_frozen_sampler", "load_hf_engine"]


def load_hf_engine(cfg: PolicyConfig) -> tuple[HFTrainable, HFSampler]:
    """The trainable model and its sampler, the sampler already holding the trainable's weights
    as version 0."""
    path = resolve_model(cfg.model)
    device = pick_device(cfg.device)
    dtype = resolve_dtype(cfg, device)
    tokenizer = load_tokenizer(path)
    reference = FrozenReference(path, dtype, device)
    trainable = HFTrainable(cfg, load_lm(path, dtype, device), tokenizer, reference)
    merged = MergedCopy(trainable.model, path, dtype, device) \
        if cfg.lora and cfg.merged_sampling else None
    sampler = HFSampler(trainable.lm, tokenizer,
                        peft_model=trainable.model if cfg.lora else None, merged=merged,
                        reference=None if cfg.lora else reference)
    sampler.load_weights(trainable.export_weights(0))
    return trainable, sampler


def load_frozen_sampler(model: str, dtype: str = "auto", device: str = "auto") -> HFSampler:
    """A sampler over a model that is never trained (a model-service backend); bf16 where the
    hardware computes it natively under "auto" (no optimizer will touch these weights)."""
    path = resolve_model(model)
    dev = pick_device(device)
    dt = DTYPES[dtype] if dtype != "auto" else auto_dtype(dev, lora=True)
    lm = load_lm(path, dt, dev).eval().requires_grad_(False)
    return HFSampler(lm, load_tokenizer(path))
