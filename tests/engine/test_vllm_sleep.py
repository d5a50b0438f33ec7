"""The colocated hand-over (engine/vllm_sleep.py) as the vLLM sampler drives it on a GPU, proven
on CPU with a recording stand-in: `vllm.LLM` and the CUDA cache release are replaced by objects
that log each call, the GPU's memory is reported as (50, 80) GiB, and the real `VLLMSampler`
and `GenerationServer` run the train-step sequence. What the stand-in cannot show (the memory
vLLM frees and takes back) has not run on a GPU in any practicum session."""

import pytest
import torch
from safetensors.torch import load_file

from practicum.engine import vllm_sampler, vllm_sleep
from practicum.engine.base import SleepingSampler, WeightUpdate
from practicum.engine.server import GenerationServer
from practicum.engine.vllm_sampler import VLLMOptions, VLLMSampler

GiB = 2**30


class RecordingLLM:
    """Stands in for `vllm.LLM`: logs the sampler's calls in order; a reload by file logs the
    dtypes it found in the file."""

    def __init__(self, log: list, **kwargs):
        self.log, self.kwargs = log, kwargs

    def sleep(self, level: int = 1) -> None:
        self.log.append(f"sleep level {level}")

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.log.append(f"wake {' '.join(tags)}")

    def collective_rpc(self, method: str, args: tuple = ()) -> list:
        dtypes = {str(t.dtype) for t in load_file(args[0]).values()}
        self.log.append(f"{method} {' '.join(sorted(dtypes))}")
        return [None]

    def reset_prefix_cache(self) -> bool:
        self.log.append("reset prefix cache")
        return True


@pytest.fixture
def on_a_gpu(monkeypatch, tmp_path):
    """A VLLMSampler factory whose engine is the recording stand-in on a (50, 80) GiB GPU;
    the log of every call, `empty_cache` included."""
    log: list[str] = []
    monkeypatch.setattr(vllm_sampler, "_gpu_memory", lambda: (50 * GiB, 80 * GiB))
    monkeypatch.setattr(vllm_sampler, "_start_engine", lambda **kw: RecordingLLM(log, **kw))
    monkeypatch.setattr(vllm_sleep, "release_cached_memory", lambda: log.append("empty_cache"))
    made = []

    def make(options=None, **kwargs) -> VLLMSampler:
        options = options or VLLMOptions(enable_sleep_mode=True)
        sampler = VLLMSampler(tmp_path, None, options=options, **kwargs)
        made.append(sampler)
        return sampler

    yield make, log
    for sampler in made:
        sampler.close()


def test_full_weights_sleep_at_level_2_and_wake_in_the_colocated_order(on_a_gpu):
    """Full fine-tuning: the weights are dropped for the step (level 2: the publish replaces
    them), the engine stays asleep after the step until the publish, which wakes it as
    empty cache -> weights -> sync -> empty cache -> KV cache, then drops the prefix cache.
    The fp32 learner's weights travel in the engine's bf16."""
    make, log = on_a_gpu
    sampler = make(dtype="bfloat16", full_weights=True)
    assert isinstance(sampler, SleepingSampler)
    started = sampler.llm.kwargs
    assert started["enable_sleep_mode"] and started["gpu_memory_utilization"] == 0.525
    assert started["dtype"] == "bfloat16"
    server = GenerationServer(sampler).start()
    try:
        with server.training():
            assert log == ["sleep level 2"]
        assert sampler.asleep and server.awaits_weights and log == ["sleep level 2"]
        with pytest.raises(RuntimeError, match="only a publish"):
            sampler.wake_up()
        with server.updating():
            server.publish(WeightUpdate(1, "full", {"w": torch.ones(4, 4)}))
    finally:
        server.stop()
    assert log == [
        "sleep level 2",
        "empty_cache",
        "wake weights",
        "reload_from_file torch.bfloat16",
        "empty_cache",
        "wake kv_cache",
        "reset prefix cache",
    ]
    assert not sampler.asleep and not server.awaits_weights and sampler.version == 1


def test_lora_keeps_its_base_at_level_1_and_wakes_when_the_step_ends(on_a_gpu):
    """With LoRA the base weights wait in CPU memory (level 1) and the engine wakes, in the
    same order, as soon as the step ends; the adapter is reloaded by the publish after."""
    make, log = on_a_gpu
    sampler = make(dtype="bfloat16", lora_rank=8)
    server = GenerationServer(sampler).start()
    try:
        with server.training():
            pass
    finally:
        server.stop()
    assert log == ["sleep level 1", "empty_cache", "wake weights", "empty_cache", "wake kv_cache"]
    assert not sampler.asleep and not server.awaits_weights


def test_without_sleep_mode_nothing_sleeps(on_a_gpu):
    make, log = on_a_gpu
    sampler = make(
        dtype="bfloat16", full_weights=True, options=VLLMOptions(enable_sleep_mode=False)
    )
    sampler.sleep()
    sampler.load_weights(WeightUpdate(1, "full", {"w": torch.ones(2)}))
    assert log == ["reload_from_file torch.bfloat16", "reset prefix cache"]
