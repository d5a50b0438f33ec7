"""The engine factory: one trainable builder, samplers from a registry of engine kinds."""

import types

import pytest

from practicum.config import HFEngineConfig, ModelConfig, load_config
from practicum.engine import factory
from practicum.engine.factory import build_sampler, load_trainable
from practicum.engine.hf import HFEngineCopy, PolicyConfig
from practicum.engine.hf_sampler import HFSampler
from practicum.errors import ConfigError
from practicum.runtime.placement import policy_config


def test_every_model_setting_reaches_the_policy_config():
    """A model.* key the factory forgot would silently fall back to PolicyConfig's default."""
    overrides = {"dtype": "float32", "device": "cpu", "attn_implementation": "eager",
                 "lora": False, "lora_r": 3, "lora_alpha": 5, "lora_dropout": 0.25,
                 "lora_target_modules": ["q_proj"], "gradient_checkpointing": True,
                 "merged_sampling": False, "init": "/some/where", "model": "/a/model",
                 "rope_scaling": {"rope_type": "yarn", "factor": 2.0}}
    assert set(overrides) == set(ModelConfig.model_fields)
    cfg = load_config(None, [f"model.{k}={v}" for k, v in overrides.items()] + ["run.seed=7"])
    policy = policy_config(cfg)
    for key, value in overrides.items():
        assert getattr(policy, key) == value, key
    assert policy.seed == 7


def test_an_unknown_engine_kind_is_refused_by_name():
    with pytest.raises(ConfigError, match="engine.kind: unknown engine 'sglang' "
                                          r"\(known: hf, vllm\)"):
        factory.sampler_builder("sglang")


def test_a_registered_kind_is_built_through_its_module(monkeypatch, tiny_model_dir):
    """A new engine is one module with `build_sampler` and one registry entry."""
    import sys
    import types

    module = types.ModuleType("fake_engine")
    module.build_sampler = lambda engine_cfg, policy, trainable=None: ("built", engine_cfg,
                                                                      policy, trainable)
    monkeypatch.setitem(sys.modules, "fake_engine", module)
    monkeypatch.setitem(factory.ENGINES, "fake", "fake_engine")

    class Cfg:
        kind = "fake"

    policy = PolicyConfig(model=str(tiny_model_dir))
    assert build_sampler(Cfg, policy) == ("built", Cfg, policy, None)


def test_hf_samplers_share_the_trainables_weights_or_hold_their_own(tiny_model_dir):
    policy = PolicyConfig(model=str(tiny_model_dir), dtype="float32", device="cpu",
                          merged_sampling=False)
    trainable = load_trainable(policy)
    shared = build_sampler(HFEngineConfig(), policy, trainable)
    assert isinstance(shared, HFSampler) and shared.lm is trainable.lm and shared.version == 0
    own = build_sampler(HFEngineConfig(), policy)
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
