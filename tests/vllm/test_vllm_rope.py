"""model.rope_scaling in vLLM: the engine's model config, built from the overrides the sampler
passes (`practicum.engine.rope.vllm_overrides`), has the learner's rope_parameters and admits a
context past the model's native one (vLLM's own config resolution); and an engine started with
YaRN samples a row past the native context with the learner's log-probs."""

import random

import pytest
import torch

from practicum.engine.base import SamplingParams
from practicum.engine.factory import load_trainable
from practicum.engine.hf_model import PolicyConfig
from practicum.engine.rope import model_config, vllm_overrides
from practicum.engine.vllm import load_vllm_engine
from practicum.engine.vllm_sampler import VLLMOptions
from tests.conftest import build_tiny_model

YARN = {"rope_type": "yarn", "factor": 2.0}


def engine_config(model, **kwargs):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(model), dtype="float32", **kwargs).create_model_config()


def test_vllm_reads_the_learners_rope_parameters_and_the_scaled_context(smollm2_dir):
    native = model_config(smollm2_dir, None).max_position_embeddings  # 8192
    cfg = engine_config(
        smollm2_dir, hf_overrides=vllm_overrides(smollm2_dir, YARN), max_model_len=2 * native
    )
    assert cfg.max_model_len == 2 * native
    learner = model_config(smollm2_dir, YARN)
    assert cfg.hf_config.rope_parameters == learner.rope_parameters
    assert cfg.hf_config.max_position_embeddings == learner.max_position_embeddings
    with pytest.raises(Exception, match=str(native)):  # unscaled, vLLM refuses the length
        engine_config(smollm2_dir, max_model_len=2 * native)


def test_a_yarn_engine_scores_a_row_past_the_native_context_as_the_learner(tmp_path):
    """A tiny Llama of 256 positions (heads of 32: vLLM's CPU attention needs them), YaRN x 2:
    vLLM samples after a 300-token prompt, and the learner with the same scaling gives the
    sampled tokens the engine's log-probs (fp32, the tolerance of the unscaled engine tests);
    the learner without it scores them differently, so the scaling reached vLLM."""
    model = build_tiny_model(
        tmp_path / "tiny", num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256
    )
    policy = PolicyConfig(model=str(model), dtype="float32", seed=0, rope_scaling=YARN)
    trainable, sampler = load_vllm_engine(policy, VLLMOptions(max_model_len=512, kv_cache_gb=1))
    try:
        rng = random.Random(0)
        prompt = [rng.randrange(100, 40000) for _ in range(300)]
        (s,) = sampler.generate(
            [prompt], SamplingParams(temperature=1.0, max_new_tokens=24), seeds=[3]
        )
    finally:
        sampler.close()
    ids = torch.tensor([prompt + s.token_ids])

    def scored(learner) -> list[float]:
        with torch.no_grad():
            return learner.token_logprobs(ids, torch.ones_like(ids))[0, len(prompt) :].tolist()

    assert len(s.token_ids) == 24
    assert max(abs(a - b) for a, b in zip(s.logprobs, scored(trainable))) < 2e-3
    unscaled = load_trainable(PolicyConfig(model=str(model), dtype="float32", seed=0))
    assert max(abs(a - b) for a, b in zip(s.logprobs, scored(unscaled))) > 0.05
