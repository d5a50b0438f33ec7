"""model.rope_scaling: one set of rotary parameters for every copy of the policy, and the
context it covers (the tiny model's native context is 1024 positions)."""

import pytest
import torch

from practicum.config import load_config
from practicum.engine.base import SamplingParams
from practicum.engine.hf import PolicyConfig, load_hf_engine
from practicum.engine.hf_model import uses_checkpointing
from practicum.engine.rope import check_context, model_config, scaled_context, vllm_overrides
from practicum.errors import ConfigError

YARN = {"rope_type": "yarn", "factor": 2.0}


def test_scaled_context_is_the_original_times_the_factor():
    assert scaled_context(1024, None) == 1024
    assert scaled_context(1024, YARN) == 2048
    # the SWE seed's second stage: a 32k model stretched x4
    assert (
        scaled_context(8192, {**YARN, "factor": 4.0, "original_max_position_embeddings": 32768})
        == 131072
    )


def test_the_model_config_keeps_its_theta_and_covers_the_scaled_context(tiny_model_dir):
    cfg = model_config(tiny_model_dir, YARN)
    assert cfg.rope_parameters == {
        "rope_theta": 10000.0,
        "rope_type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 1024,
    }
    assert cfg.max_position_embeddings == 2048
    # vLLM gets the very same dict (hf_overrides)
    assert vllm_overrides(tiny_model_dir, YARN) == {
        "rope_parameters": cfg.rope_parameters,
        "max_position_embeddings": 2048,
    }
    assert vllm_overrides(tiny_model_dir, None) == {}
    linear = model_config(tiny_model_dir, {"rope_type": "linear", "factor": 4.0})
    assert linear.rope_parameters == {"rope_theta": 10000.0, "rope_type": "linear", "factor": 4.0}


def test_a_row_past_the_context_is_refused_in_one_line(tiny_model_dir, tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"^config error at rollout.max_seq_len: 1500 tokens "
        r"exceed the model's 1024-token context \(its own; set "
        r"model.rope_scaling, e.g. \{rope_type: yarn, factor: "
        r"2\}, to extend it\)$",
    ):
        check_context(tiny_model_dir, None, 1500, "rollout.max_seq_len")
    assert check_context(tiny_model_dir, YARN, 1500, "rollout.max_seq_len") == 2048
    # a model that ships a scaled RoPE (Llama 3.1: 8k pretrained, 128k as shipped) covers its own
    shipped = model_config(
        tiny_model_dir,
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    )
    shipped.save_pretrained(tmp_path)
    assert check_context(tmp_path, None, 8192, "rollout.max_seq_len") == 8192
    with pytest.raises(
        ConfigError,
        match=r"3000 tokens exceed the model's 2048-token context "
        r"\(1024 native x 2 \(yarn\)\)",
    ):
        check_context(tiny_model_dir, YARN, 3000, "rollout.max_seq_len")


def test_placing_a_run_checks_its_rows_before_anything_loads(tiny_model_dir, tmp_path):
    from practicum.runtime.placement import place

    cfg = load_config(
        None,
        [
            f"model.model={tiny_model_dir}",
            "rollout.max_seq_len=1500",
            f"run.out_dir={tmp_path}",
            "task.name=toy",
        ],
    )
    with pytest.raises(ConfigError, match="at rollout.max_seq_len: 1500 tokens exceed"):
        place(cfg)


def test_rope_scaling_is_typed_and_errors_name_the_key():
    cfg = load_config(
        None,
        [
            "model.rope_scaling={rope_type: yarn, factor: 4, "
            "original_max_position_embeddings: 32768}"
        ],
    )
    assert cfg.model.rope_scaling.model_dump(exclude_none=True) == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }
    for bad, says in [
        (
            "{rope_type: yarn, factor: 0.5}",
            r"at model.rope_scaling.factor: Input should be greater than 1 for "
            r"model.rope_scaling.rope_type=yarn",
        ),
        ("{rope_type: yarn, factor: 2, beta: 3}", r"at model.rope_scaling.beta: unknown key"),
        (
            "{rope_type: dynamic, factor: 2}",
            r"at model.rope_scaling: rope_type dynamic changes the frequencies with "
            r"the sequence length",
        ),
    ]:
        with pytest.raises(ConfigError, match=f"^config error {says}"):
            load_config(None, [f"model.rope_scaling={bad}"])


def test_gradient_checkpointing_defaults_to_on_a_gpu_only():
    cfg = PolicyConfig()
    assert cfg.gradient_checkpointing is None and load_config().model.gradient_checkpointing is None
    assert uses_checkpointing(cfg, torch.device("cuda")) is True
    assert uses_checkpointing(cfg, torch.device("cpu")) is False
    assert uses_checkpointing(PolicyConfig(gradient_checkpointing=True), torch.device("cpu"))
    assert not uses_checkpointing(PolicyConfig(gradient_checkpointing=False), torch.device("cuda"))


def test_yarn_changes_long_rows_and_the_sampler_scores_them_as_the_learner(
    tiny_model_dir, tmp_path
):
    """A 1100-token prompt, past the tiny model's 1024 positions: with YaRN x2 the learner's
    log-probs differ from the unscaled model's, and the HF sampler (LoRA merged into a copy
    loaded on its own: `MergedCopy`) sampled its tokens with the learner's log-probs. The saved
    adapter is served on the base scaled the same way."""
    from practicum.serve.loading import _policy_config, resolve_target

    trainable, sampler = load_hf_engine(
        PolicyConfig(model=str(tiny_model_dir), dtype="float32", rope_scaling=YARN)
    )
    assert sampler.merged is not None and sampler.max_positions == 2048
    prompt = torch.randint(100, 40000, (1100,), generator=torch.Generator().manual_seed(0))
    out = sampler.generate([prompt.tolist()], SamplingParams(max_new_tokens=8), seeds=[1])[0]
    row = torch.tensor([prompt.tolist() + out.token_ids])
    plain, _ = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    with torch.no_grad():
        scaled = trainable.token_logprobs(row, torch.ones_like(row))[0]
        unscaled = plain.token_logprobs(row, torch.ones_like(row))[0]
    assert torch.allclose(scaled[1100:], torch.tensor(out.logprobs), atol=1e-4)
    assert (scaled - unscaled)[1024:].abs().max() > 0.05
    trainable.save(tmp_path / "policy")
    assert _policy_config(resolve_target(tmp_path / "policy"), "float32").rope_scaling_dict == YARN
