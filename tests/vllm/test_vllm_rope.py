"""model.rope_scaling in vLLM: the engine's model config, built from the overrides the sampler
passes (`practicum.engine.rope.vllm_overrides`), has the learner's rope_parameters and admits a
context past the model's native one (no engine start: vLLM's own config resolution)."""

import pytest

from practicum.engine.rope import model_config, vllm_overrides

YARN = {"rope_type": "yarn", "factor": 2.0}


def engine_config(model, **kwargs):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(model), dtype="float32", **kwargs).create_model_config()


def test_vllm_reads_the_learners_rope_parameters_and_the_scaled_context(smollm2_dir):
    native = model_config(smollm2_dir, None).max_position_embeddings  # 8192
    cfg = engine_config(smollm2_dir, hf_overrides=vllm_overrides(smollm2_dir, YARN),
                        max_model_len=2 * native)
    assert cfg.max_model_len == 2 * native
    learner = model_config(smollm2_dir, YARN)
    assert cfg.hf_config.rope_parameters == learner.rope_parameters
    assert cfg.hf_config.max_position_embeddings == learner.max_position_embeddings
    with pytest.raises(Exception, match=str(native)):  # unscaled, vLLM refuses the length
        engine_config(smollm2_dir, max_model_len=2 * native)
