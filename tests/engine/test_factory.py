"""The engine factory: one trainable builder, samplers from a registry of engine kinds."""

import types

import pytest

from practicum.config import load_config
from practicum.engine import factory, kinds
from practicum.engine.factory import build_sampler, load_trainable
from practicum.engine.hf import HFEngineCopy, PolicyConfig
from practicum.engine.hf_sampler import HFSampler
from practicum.engine.options import EngineOptions, HFOptions, ModelOptions
from practicum.errors import ConfigError
from practicum.runtime.placement import policy_config


def test_every_model_setting_reaches_the_policy_config():
    """The engines read the model section itself, plus the run's seed."""
    overrides = {
        "dtype": "float32",
        "device": "cpu",
        "attn_implementation": "eager",
        "lora": False,
        "lora_r": 3,
        "lora_alpha": 5,
        "lora_dropout": 0.25,
        "lora_target_modules": ["q_proj"],
        "gradient_checkpointing": True,
        "merged_sampling": False,
        "init": "/some/where",
        "model": "/a/model",
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0},
    }
    assert set(overrides) == set(ModelOptions.model_fields)
    cfg = load_config(None, [f"model.{k}={v}" for k, v in overrides.items()] + ["run.seed=7"])
    policy = policy_config(cfg)
    for key, value in overrides.items():
        got = policy.rope_scaling_dict if key == "rope_scaling" else getattr(policy, key)
        assert got == value, key
    assert policy.seed == 7


def test_an_unknown_engine_kind_is_refused_by_name():
    with pytest.raises(
        ConfigError,
        match="engine.kind: unknown engine 'sglang' "
        r"\(known: hf, vllm\)",
    ):
        factory.sampler_builder("sglang")


def test_a_registered_kind_is_validated_by_its_options_and_built_by_its_builder(
    monkeypatch, tiny_model_dir
):
    """A new engine is one module registering its options model and its builder."""

    class FakeOptions(EngineOptions):
        kind: str = "fake"
        depth: int = 1

    monkeypatch.setitem(
        kinds.ENGINES,
        "fake",
        kinds.EngineKind(
            "fake", FakeOptions, lambda engine_cfg, policy, trainable=None: ("built", engine_cfg)
        ),
    )
    cfg = load_config(None, ["engine.kind=fake", "engine.depth=3"])
    assert cfg.engine == FakeOptions(depth=3)
    assert cfg.model_dump()["engine"] == {"kind": "fake", "depth": 3}
    with pytest.raises(
        ConfigError,
        match=r"^config error at engine.depth: Input should be a "
        r"valid integer.* for engine.kind=fake",
    ):
        load_config(None, ["engine.kind=fake", "engine.depth=x"])
    policy = PolicyConfig(model=str(tiny_model_dir))
    assert build_sampler(cfg.engine, policy) == ("built", cfg.engine)


def test_hf_samplers_share_the_trainables_weights_or_hold_their_own(tiny_model_dir):
    policy = PolicyConfig(
        model=str(tiny_model_dir), dtype="float32", device="cpu", merged_sampling=False
    )
    trainable = load_trainable(policy)
    shared = build_sampler(HFOptions(), policy, trainable)
    assert isinstance(shared, HFSampler) and shared.lm is trainable.lm and shared.version == 0
    own = build_sampler(HFOptions(), policy)
    assert isinstance(own, HFEngineCopy)
    assert own.sampler.lm is not trainable.lm and own.holder is not trainable
    assert not any(p.requires_grad for p in own.holder.model.parameters())


def test_a_sampling_copy_of_full_finetuning_is_bf16_on_a_gpu(monkeypatch):
    """The wiring only (no GPU here): under model.dtype=auto the copy a sampler holds is
    loaded in bf16 on a bf16 GPU, while the learner's trainable resolves to fp32."""
    import torch
    from torch import nn

    asked = []

    def load(policy):
        asked.append(policy)
        return types.SimpleNamespace(model=nn.Linear(1, 1))

    monkeypatch.setattr(factory, "pick_device", lambda spec: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(factory, "load_trainable", load)
    policy = PolicyConfig(model="m", dtype="auto", lora=False)
    factory.load_sampling_copy(policy)
    assert asked[0].dtype == "bfloat16" and asked[0].lora is False
    assert factory.resolve_dtype(policy, torch.device("cuda")) == torch.float32
