"""Where the policy's two faces are built: the trainable once, the sampler by engine kind.

    trainable = load_trainable(policy)               # the one place an HF trainable is built
    sampler = build_sampler(cfg.engine, policy, trainable)   # shares its weights where it can
    sampler = build_sampler(cfg.engine, policy)              # weights of its own (an actor)

Engine kinds form a registry (`practicum.engine.kinds`): `engine.kind` names an options
model and a `build_sampler(engine_options, policy, trainable)` returning a `Sampler`. Adding an
engine is one module that registers both; builders are imported only when their kind is
used, so vLLM's own environment is needed only for `engine.kind: vllm`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from practicum.engine.hf_model import (
    DTYPES,
    FrozenReference,
    load_lm,
    load_tokenizer,
    pick_device,
    resolve_dtype,
)
from practicum.engine.kinds import engine_kind
from practicum.engine.models import resolve_model
from practicum.engine.options import EngineOptions, PolicyConfig

if TYPE_CHECKING:
    from practicum.engine.base import Sampler
    from practicum.engine.hf_trainable import HFTrainable


class SamplerBuilder(Protocol):
    def __call__(
        self, engine_cfg: EngineOptions, policy: PolicyConfig, trainable: HFTrainable | None = None
    ) -> Sampler: ...


def load_trainable(policy: PolicyConfig) -> HFTrainable:
    """The model the learner trains (HF + peft), on `policy.device` (refused with one line
    before anything loads when this machine lacks it)."""
    from practicum.engine.hf_trainable import HFTrainable

    device = pick_device(policy.device)
    path = resolve_model(policy.model)
    dtype = resolve_dtype(policy, device)
    return HFTrainable(
        policy,
        load_lm(path, dtype, device, policy.attn_implementation, policy.rope_scaling_dict),
        load_tokenizer(path),
        FrozenReference(path, dtype, device, policy.attn_implementation, policy.rope_scaling_dict),
    )


def load_sampling_copy(policy: PolicyConfig) -> HFTrainable:
    """A frozen trainable-shaped copy of the policy for a sampler with weights of its own: the
    published versions are loaded into it (the driver publishes its starting weights, `init`
    included, as version 0). Under model.dtype=auto it is bf16 on a GPU that computes it
    natively, full fine-tuning included (`practicum.engine.device.auto_dtype`)."""
    dtype = resolve_dtype(policy, pick_device(policy.device), sampler=True)
    name = next(k for k, v in DTYPES.items() if v == dtype)
    holder = load_trainable(
        policy.model_copy(update={"dtype": name, "init": None, "gradient_checkpointing": False})
    )
    holder.model.requires_grad_(False)
    return holder


def sampler_builder(kind: str) -> SamplerBuilder:
    """The registered `build_sampler` of engine kind `kind`."""
    return engine_kind(kind).build_sampler()


def build_sampler(
    engine_cfg: EngineOptions, policy: PolicyConfig, trainable: HFTrainable | None = None
) -> Sampler:
    """A sampler of kind `engine_cfg.kind` holding the policy's starting weights as version 0
    when `trainable` is given (it may share them), else the untrained policy until the first
    `load_weights`."""
    return sampler_builder(engine_cfg.kind)(engine_cfg, policy, trainable)
