"""The vLLM engine (`engine.kind: vllm`): a vLLM sampler the learner publishes weights to; the
trainable stays HF + peft (`practicum.engine.factory.load_trainable`).

    sampler = build_sampler(engine_cfg, policy, trainable)   # the registry's entry (factory)
    trainable, sampler = load_vllm_engine(PolicyConfig(model="smollm2-135m-instruct"), options)
"""

from __future__ import annotations

from practicum.engine.factory import load_trainable
from practicum.engine.hf_model import load_tokenizer, pick_device, resolve_dtype
from practicum.engine.hf_trainable import HFTrainable
from practicum.engine.models import resolve_model
from practicum.engine.options import PolicyConfig, VLLMOptions
from practicum.engine.rope import vllm_overrides
from practicum.engine.vllm_sampler import VLLMSampler


def build_sampler(
    options: VLLMOptions, policy: PolicyConfig, trainable: HFTrainable | None = None
) -> VLLMSampler:
    """The registry's builder for engine.kind vllm: a vLLM engine of the policy's model,
    holding the trainable's weights as version 0 when one is given."""
    return _vllm_sampler(policy, options, trainable)


def _vllm_sampler(
    policy: PolicyConfig, options: VLLMOptions, trainable: HFTrainable | None
) -> VLLMSampler:
    path = resolve_model(policy.model)
    dtype = resolve_dtype(policy, pick_device(policy.device), sampler=True)  # bf16 on a GPU
    tokenizer = trainable.tokenizer if trainable is not None else load_tokenizer(path)
    sampler = VLLMSampler(
        path,
        tokenizer,
        dtype=str(dtype).removeprefix("torch."),
        lora_rank=policy.lora_r if policy.lora else None,
        full_weights=not policy.lora,
        options=options,
        seed=policy.seed,
        hf_overrides=vllm_overrides(path, policy.rope_scaling_dict),
    )
    if trainable is not None:
        sampler.load_weights(trainable.export_weights(0))
    return sampler


def load_vllm_engine(
    cfg: PolicyConfig, options: VLLMOptions | None = None
) -> tuple[HFTrainable, VLLMSampler]:
    """The trainable (HF + peft, as with the HF engine) and a vLLM sampler already holding its
    weights as version 0."""
    trainable = load_trainable(cfg)
    return trainable, _vllm_sampler(cfg, options or VLLMOptions(), trainable)
