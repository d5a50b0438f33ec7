"""The vLLM engine's GPU options, checked without vLLM: what `vllm.LLM` is given for a config
on CPU and on a GPU beside the learner, and the config's validation of each option."""

import pytest

from practicum.config import load_config
from practicum.engine.vllm_sampler import VLLMOptions, llm_options, memory_share
from practicum.errors import ConfigError

GiB = 2**30


def test_beside_the_learner_vllm_takes_the_memory_left_less_a_margin():
    # 80 GiB GPU, learner holds 30: 50/80 = 0.625 free, less 0.1 -> 0.525 of the whole GPU
    assert memory_share(50 * GiB, 80 * GiB) == 0.525
    assert memory_share(80 * GiB, 80 * GiB) == 0.9  # a GPU of its own: vLLM's usual share
    with pytest.raises(ValueError, match="only 10.0 of the GPU's 80.0 GiB are free"):
        memory_share(10 * GiB, 80 * GiB)


def test_the_options_reach_llm_and_gpu_only_ones_only_on_a_gpu():
    opts = VLLMOptions(
        max_model_len=512,
        tensor_parallel_size=2,
        enable_sleep_mode=True,
        enforce_eager=False,
        max_num_seqs=64,
    )
    cpu = llm_options(opts, None)
    assert cpu == {
        "max_model_len": 512,
        "enforce_eager": False,
        "tensor_parallel_size": 2,
        "max_num_seqs": 64,
    }  # the CPU build refuses sleep mode and a memory share
    gpu = llm_options(opts, (50 * GiB, 80 * GiB))
    assert gpu["gpu_memory_utilization"] == 0.525 and gpu["enable_sleep_mode"] is True
    fixed = llm_options(VLLMOptions(gpu_memory_utilization=0.3), (50 * GiB, 80 * GiB))
    assert fixed["gpu_memory_utilization"] == 0.3 and "max_num_seqs" not in fixed


def test_engine_options_are_validated_by_name():
    cfg = load_config(
        None,
        [
            "engine.kind=vllm",
            "engine.gpu_memory_utilization=0.4",
            "engine.tensor_parallel_size=2",
            "engine.enable_sleep_mode=true",
            "engine.max_num_seqs=32",
            "engine.weight_sync=file",
        ],
    )
    assert (
        cfg.engine.gpu_memory_utilization,
        cfg.engine.tensor_parallel_size,
        cfg.engine.max_num_seqs,
        cfg.engine.weight_sync,
    ) == (0.4, 2, 32, "file")
    for bad, key in [
        ("engine.gpu_memory_utilization=1.5", "gpu_memory_utilization"),
        ("engine.tensor_parallel_size=0", "tensor_parallel_size"),
        ("engine.max_num_seqs=0", "max_num_seqs"),
        ("engine.weight_sync=nccl", "weight_sync"),
    ]:
        with pytest.raises(
            ConfigError, match=f"config error at engine.{key}: .* for engine.kind=vllm"
        ):
            load_config(None, ["engine.kind=vllm", bad])
    with pytest.raises(ConfigError, match="config error at engine.enable_sleep_mode: unknown key"):
        load_config(None, ["engine.enable_sleep_mode=true"])  # the hf engine has no such option


def test_broadcast_is_for_full_weights_on_a_gpu_of_their_own():
    """weight_sync=broadcast: refused in one line with LoRA (adapters travel as a folder) and
    for a learner here on one of the GPUs the engine here takes (NCCL joins no two processes on
    one GPU); a GPU beyond them, the CPU, or a learner elsewhere pass."""
    full = ["engine.kind=vllm", "engine.weight_sync=broadcast", "model.lora=false"]
    for ok in (
        ["model.device=cpu"],
        ["model.device=cuda:1"],
        ["model.device=cuda:2", "engine.tensor_parallel_size=2"],
        ["model.device=cuda", "placement.kind=ray", "placement.engine.gpus=1"],
    ):
        assert load_config(None, full + ok).engine.weight_sync == "broadcast"
    with pytest.raises(
        ConfigError,
        match=r"^config error: engine.weight_sync=broadcast sends "
        r"full weights \(model.lora=false\)",
    ):
        load_config(None, ["engine.kind=vllm", "engine.weight_sync=broadcast"])
    for device, tp in [("cuda", 1), ("cuda:0", 1), ("cuda:1", 2)]:
        with pytest.raises(ConfigError, match=f"the learner's {device} is one of the {tp} GPU"):
            load_config(
                None, full + [f"model.device={device}", f"engine.tensor_parallel_size={tp}"]
            )


def test_vllm_in_an_engine_actor_needs_vllm_here_and_a_gpu_per_shard():
    """Checked before anything loads: a GPU per shard when the config is read, vLLM installed
    here when the run is placed (this environment has none: the CPU build lives in a venv of
    its own)."""
    from importlib.util import find_spec

    from practicum.runtime.placement import place

    actor = ["engine.kind=vllm", "placement.kind=ray", "placement.engine.gpus=1"]
    if find_spec("vllm") is None:
        with pytest.raises(
            ConfigError,
            match="^config error at placement.engine: "
            "engine.kind=vllm in an engine actor needs vllm "
            "installed in this Python environment",
        ):
            place(load_config(None, actor))
    with pytest.raises(
        ConfigError,
        match=r"^config error: placement.engine.gpus=1: "
        r"engine.tensor_parallel_size=2 shards the model",
    ):
        load_config(None, actor + ["engine.tensor_parallel_size=2"])


def test_the_multi_gpu_sampling_example_loads_in_its_three_layouts():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "configs" / "multi_gpu_sampling.yaml"
    colocated = load_config(path)
    assert colocated.engine.enable_sleep_mode and colocated.placement.engine is None
    own = load_config(
        path, ["engine.enable_sleep_mode=false", "placement.engine={gpus: 1, cpus: 2, replicas: 4}"]
    )
    assert own.placement.engine.replicas == 4 and own.placement.engine.gpus == 1
    nccl = load_config(
        path,
        [
            "model.device=cuda:1",
            "model.lora=false",
            "engine.weight_sync=broadcast",
            "engine.enable_sleep_mode=false",
        ],
    )
    assert nccl.engine.weight_sync == "broadcast" and nccl.model.device == "cuda:1"
    with pytest.raises(ConfigError, match="NCCL cannot join two processes on one GPU"):
        load_config(path, ["model.lora=false", "engine.weight_sync=broadcast"])  # both on GPU 0


def test_rope_scaling_reaches_vllm_as_the_learners_rope_parameters(tiny_model_dir, monkeypatch):
    """vLLM is not installed here (its tests run in .venv-vllm): what `vllm.LLM` would be
    given is captured instead. Its hf_overrides carry the very rope_parameters the learner's
    model config has, so the engine computes the same rotary tables (tests/vllm/test_vllm_rope.py
    checks vLLM's own config reads them)."""
    from practicum.engine import vllm_sampler
    from practicum.engine.hf_model import PolicyConfig
    from practicum.engine.rope import model_config
    from practicum.engine.vllm import _vllm_sampler

    given = {}

    def start(**kwargs):
        given.update(kwargs)
        raise RuntimeError("captured")

    monkeypatch.setattr(vllm_sampler, "_start_engine", start)
    yarn = {"rope_type": "yarn", "factor": 2.0}
    with pytest.raises(RuntimeError, match="captured"):
        _vllm_sampler(
            PolicyConfig(model=str(tiny_model_dir), rope_scaling=yarn),
            VLLMOptions(max_model_len=2048),
            None,
        )
    learner = model_config(tiny_model_dir, yarn)
    assert given["hf_overrides"] == {
        "rope_parameters": learner.rope_parameters,
        "max_position_embeddings": 2048,
    }
    assert given["max_model_len"] == 2048
