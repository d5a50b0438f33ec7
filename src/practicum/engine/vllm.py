"""Build the vLLM engine: the HF trainable the learner updates, and a vLLM sampler it publishes
weights to (`engine.kind: vllm`).

    trainable, sampler = load_vllm_engine(PolicyConfig(model="smollm2-135m-instruct"), options)
"""

from __future__ import annotations

from practicum.engine.hf_model import (
    FrozenReference,
    PolicyConfig,
    load_lm,
    load_tokenizer,
    pick_device,
    resolve_dtype,
)
from practicum.engine.hf_trainable import HFTrainable
from practicum.engine.models import resolve_model
from practicum.engine.vllm_sampler import VLLMOptions, VLLMSampler


def load_vllm_engine(cfg: PolicyConfig, options: VLLMOptions | None = None
                     ) -> tuple[HFTrainable, VLLMSampler]:
    """The trainable (HF + peft, as with the HF engine) and a vLLM sampler already holding its
    weights as version 0."""
    path = resolve_model(cfg.model)
    device = pick_device(cfg.device)
    dtype = resolve_dtype(cfg, device)
    tokenizer = load_tokenizer(path)
    trainable = HFTrainable(cfg, load_lm(path, dtype, device), tokenizer,
                            FrozenReference(path, dtype, device))
    sampler = VLLMSampler(path, tokenizer, dtype=str(dtype).removeprefix("torch."),
                          lora_rank=cfg.lora_r if cfg.lora else None, full_weights=not cfg.lora,
                          options=options, seed=cfg.seed)
    sampler.load_weights(trainable.export_weights(0))
    return trainable, sampler
