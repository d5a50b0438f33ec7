"""The CPU dtype choice: bf16 only where the CPU has it natively and it measured faster."""

import json

import pytest
import torch

from practicum.engine import device


@pytest.fixture
def probe(monkeypatch, tmp_path):
    """Timed seconds per dtype set by the test; counts how often the probe ran."""
    monkeypatch.setenv("PRACTICUM_CACHE", str(tmp_path))
    device.cpu_bf16_is_faster.cache_clear()
    seconds = {torch.bfloat16: 1.0, torch.float32: 2.0}
    calls = []

    def fake(dtype, repeats=5):
        calls.append(dtype)
        return seconds[dtype]

    monkeypatch.setattr(device, "_probe_seconds", fake)
    yield seconds, calls, tmp_path / "cpu_dtype.json"
    device.cpu_bf16_is_faster.cache_clear()


@pytest.mark.parametrize("bf16_s, want", [(1.0, torch.bfloat16), (3.0, torch.float32)])
def test_lora_on_a_native_bf16_cpu_takes_the_faster_dtype(monkeypatch, probe, bf16_s, want):
    seconds, _, _ = probe
    seconds[torch.bfloat16] = bf16_s
    monkeypatch.setattr(device, "_cpu_has_bf16", lambda: True)
    assert device.auto_dtype(torch.device("cpu"), lora=True) == want


def test_a_cpu_without_native_bf16_is_never_probed(monkeypatch, probe):
    _, calls, _ = probe
    monkeypatch.setattr(device, "_cpu_has_bf16", lambda: False)
    assert device.auto_dtype(torch.device("cpu"), lora=True) == torch.float32
    assert calls == []


def test_the_measurement_is_taken_once_per_machine(monkeypatch, probe):
    seconds, calls, cache = probe
    assert device.cpu_bf16_is_faster() is True
    assert len(calls) == 2
    entry = json.loads(cache.read_text())[device._cpu_key()]
    assert entry == {"bfloat16_s": 1.0, "float32_s": 2.0}
    # a new process (cache cleared) reads the file, even if the CPU would time differently now
    device.cpu_bf16_is_faster.cache_clear()
    seconds[torch.bfloat16] = 5.0
    assert device.cpu_bf16_is_faster() is True
    assert len(calls) == 2
    # a damaged file is measured again and rewritten
    cache.write_text("{not json")
    device.cpu_bf16_is_faster.cache_clear()
    assert device.cpu_bf16_is_faster() is False
    assert json.loads(cache.read_text())[device._cpu_key()]["bfloat16_s"] == 5.0


def test_the_probe_times_both_dtypes_for_real():
    for dtype in (torch.float32, torch.bfloat16):
        assert 0.0 < device._probe_seconds(dtype, repeats=1) < 60.0


def test_auto_dtype_is_fp32_for_full_finetuning():
    assert device.auto_dtype(torch.device("cpu"), lora=False) == torch.float32
    assert device.auto_dtype(torch.device("cpu"), lora=True) in (torch.float32, torch.bfloat16)
    assert device.auto_dtype(torch.device("cpu"), lora=False, sampler=True) == torch.float32


@pytest.mark.parametrize("native", [True, False])
def test_a_sampler_of_its_own_samples_full_finetuning_in_bf16_on_a_gpu(monkeypatch, native):
    """The decision only (no GPU here): on a GPU with native bf16 the learner of full
    fine-tuning stays fp32 while a sampler holding its own weights takes bf16."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: native)
    gpu = torch.device("cuda")
    want = torch.bfloat16 if native else torch.float32
    assert device.auto_dtype(gpu, lora=False) == torch.float32
    assert device.auto_dtype(gpu, lora=False, sampler=True) == want
    assert (
        device.auto_dtype(gpu, lora=True) == device.auto_dtype(gpu, lora=True, sampler=True) == want
    )
