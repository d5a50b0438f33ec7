"""hf_model: where the model is placed (model.device) and which attention kernel it runs
(model.attn_implementation); a setting this machine cannot honour is refused in one line."""

import pytest
import torch

from practicum.engine.hf_model import (
    FrozenReference,
    PolicyConfig,
    load_lm,
    merged_sampling_on,
    pick_device,
)
from practicum.errors import ConfigError


def gpus(monkeypatch, n: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


@pytest.mark.parametrize(
    "n, spec, expected",
    [
        (0, "auto", "cpu"),
        (0, "cpu", "cpu"),
        (2, "auto", "cuda"),
        (2, "cuda", "cuda"),
        (2, "cuda:1", "cuda:1"),
    ],
)
def test_pick_device_places_the_model_where_asked(monkeypatch, n, spec, expected):
    gpus(monkeypatch, n)
    assert pick_device(spec) == torch.device(expected)


@pytest.mark.parametrize(
    "n, spec, says",
    [
        (0, "cuda", "'cuda', but this machine has no CUDA device"),
        (0, "cuda:7", "'cuda:7', but this machine has no CUDA device"),
        (2, "cuda:2", "'cuda:2', but this machine has 2 CUDA device(s), cuda:0 to cuda:1"),
        (2, "cuda:7", "'cuda:7', but this machine has 2"),
        (2, "gpu", "expected auto, cpu, cuda or cuda:N; got 'gpu'"),
        (2, "meta", "expected auto, cpu, cuda or cuda:N; got 'meta'"),
    ],
)
def test_a_device_this_machine_lacks_is_refused_in_one_line(monkeypatch, n, spec, says):
    gpus(monkeypatch, n)
    with pytest.raises(ConfigError) as err:
        pick_device(spec)
    message = str(err.value)
    assert message.startswith("config error at model.device: ") and says in message
    assert "\n" not in message


def test_the_attention_kernel_reaches_the_model(tiny_model_dir):
    cpu = torch.device("cpu")
    assert load_lm(tiny_model_dir, torch.float32, cpu).config._attn_implementation == "sdpa"
    eager = load_lm(tiny_model_dir, torch.float32, cpu, attn_implementation="eager")
    assert eager.config._attn_implementation == "eager"
    ref = FrozenReference(tiny_model_dir, torch.float32, cpu, attn_implementation="eager")
    assert ref.lm.config._attn_implementation == "eager"


@pytest.mark.parametrize(
    "kernel, device, says",
    [
        ("flash_attention_2", "cpu", "flash_attention_2 runs on a CUDA GPU, not on cpu"),
        ("flash_attention_3000", "cpu", "expected sdpa, eager, flash_attention_2"),
    ],
)
def test_an_attention_kernel_that_cannot_run_here_is_refused(tiny_model_dir, kernel, device, says):
    with pytest.raises(ConfigError) as err:
        load_lm(tiny_model_dir, torch.float32, torch.device(device), attn_implementation=kernel)
    message = str(err.value)
    assert message.startswith("config error at model.attn_implementation: ") and says in message
    assert "\n" not in message


def test_flash_attention_without_its_package_is_refused_before_loading(tiny_model_dir, monkeypatch):
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_flash_attn_2_available", lambda: False)
    with pytest.raises(
        ConfigError,
        match="model.attn_implementation: flash_attention_2 needs the flash-attn package",
    ):
        load_lm(
            tiny_model_dir,
            torch.float32,
            torch.device("cuda"),
            attn_implementation="flash_attention_2",
        )


@pytest.mark.parametrize("bias", [False, True])
def test_the_blockwise_fp32_head_equals_one_fp32_product(monkeypatch, bias):
    """fp32_linear (the head under grad without a kept fp32 copy) gives F.linear's fp32 logits
    and gradients for a bf16 weight, over blocks of vocabulary rows (3 of 4, 4 and 2 here)."""
    import practicum.engine.hf_model as hf_model

    monkeypatch.setattr(hf_model, "HEAD_BLOCK_ROWS", 4)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 3, 8, generator=g).to(torch.bfloat16).requires_grad_(True)
    weight = torch.randn(10, 8, generator=g).to(torch.bfloat16).requires_grad_(True)
    b = torch.randn(10, generator=g).requires_grad_(True) if bias else None
    upstream = torch.randn(2, 3, 10, generator=g)

    got = hf_model.fp32_linear(hidden, weight, b)
    got.backward(upstream)
    grads = [t.grad.clone() for t in (hidden, weight, b) if t is not None]
    for t in (hidden, weight, b):
        if t is not None:
            t.grad = None
    want = torch.nn.functional.linear(hidden.float(), weight.float(), b)
    want.backward(upstream)
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-5)
    for mine, theirs in zip(grads, [t.grad for t in (hidden, weight, b) if t is not None]):
        assert mine.dtype == theirs.dtype and torch.allclose(
            mine.float(), theirs.float(), atol=1e-2, rtol=1e-2
        )


def test_merged_sampling_is_on_by_default_on_a_cpu_only():
    """Unset, a LoRA policy samples from a merged copy on a CPU (speed) and through the
    learner's own adapter on a GPU, where the merged copy's rounding widened the gap
    (benchmarks/lora_gap.py); an explicit choice wins, and full fine-tuning never merges."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert merged_sampling_on(PolicyConfig(), cpu)
    assert not merged_sampling_on(PolicyConfig(), gpu)
    assert merged_sampling_on(PolicyConfig(merged_sampling=True), gpu)
    assert not merged_sampling_on(PolicyConfig(merged_sampling=False), cpu)
    assert not merged_sampling_on(PolicyConfig(lora=False, merged_sampling=True), cpu)
