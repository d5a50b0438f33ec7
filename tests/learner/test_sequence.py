"""learner/sequence.py: sequence parallelism (Ulysses) over real gloo ranks trains as one
process does, alone and beside FSDP2's data shares; a model whose heads it cannot split is
refused (the mesh's own check: tests/test_placement_plan.py)."""

from types import SimpleNamespace

import pytest
import torch

from practicum.config import load_config
from practicum.errors import ConfigError
from practicum.learner.rows import TrainBatch
from practicum.learner.sequence import check_model
from practicum.runtime.placement import check_launch
from tests.learner.sequence_ranks import (
    long_rows,
    one_process_step,
    sequence_config,
    train_in_sequence_groups,
)
from tests.ranks import spawn


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as in each rank."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_same_step(got: dict, want: dict, plan: str) -> None:
    """The step's loss, KL, entropy and gradient norms to 1e-5 (relative); the first update's
    gradients, each parameter's to 1e-5 of its largest entry (the second update's start from
    weights AdamW moved by ~lr wherever the gradient was near zero, so float rounding there
    moves them by up to ~lr); the weights after the step to 1e-6 (lr is 3e-5)."""
    for key in ("loss", "kl_ref", "entropy", "logprob_gap", "grad_norm", "train_tokens"):
        assert got["metrics"][key] == pytest.approx(want["metrics"][key], rel=1e-5), (
            f"{plan}: {key}"
        )
    assert len(got["grads"]) == len(want["grads"]) == 2  # two updates
    first, expected = got["grads"][0], want["grads"][0]
    assert first.keys() == expected.keys()
    assert all(g.abs().max() > 0 for name, g in expected.items() if "lora_A" not in name)
    for name, g in expected.items():  # LoRA's A: 0 while B starts at 0, and equal to it
        assert (first[name] - g).abs().max() <= 1e-5 * g.abs().max(), f"{plan}: {name}"
    for name, w in want["weights"].items():
        assert (got["weights"][name] - w).abs().max().item() <= 1e-6, f"{plan}: {name}"


def one_row() -> TrainBatch:
    """One 301-token row (not a multiple of 4: the last slice is padded), 2 updates."""
    return TrainBatch(long_rows((301,)), epochs=2)


def three_rows() -> TrainBatch:
    """3 rows (301, 180 and 243 tokens: the last not a multiple of 2): 2 data shares take 2 and
    1 of them, as one process's micro-batches of 2 do. The last row's prompt (130 tokens) covers
    the first of its 2 slices: that rank scores nothing, yet takes its part in the backward."""
    return TrainBatch(long_rows((301, 180, 243), seed=1, prompts=(12, 12, 130)), epochs=2)


PLANS = {
    "sequence 4, LoRA": {"sequence": 4, "lora": True, "batch": one_row()},
    "2 x 2": {"sequence": 2, "lora": False, "batch": three_rows()},
    "HSDP 2 x 2": {"sequence": 2, "replicate": 2, "lora": False, "batch": three_rows()},
}
"""The meshes of one spawn of 4 ranks:
- sequence 4 (FSDP2 over all 4): one long row split over 4 ranks, the tiny model's 2 key-value
  heads repeated to one per query head; LoRA (its KL reference: the adapter off);
- 2 x 2 (FSDP2 over all 4): 2 data shares x 2 sequence ranks on 3 rows, full fine-tuning (its
  frozen reference sequence-parallel too); the first group trains a micro-batch of 2 rows, the
  second one long row alone over 2 ranks, the heads split as they are;
- the same over a hybrid mesh (2 copies, each a sequence group, FSDP2 inside a copy)."""


@pytest.mark.slow
def test_sequence_parallel_ranks_train_as_one_process(tiny_model_dir, tmp_path):
    spawn(4, train_in_sequence_groups, tiny_model_dir, list(PLANS.values()), tmp_path / "got.pt")
    got = torch.load(tmp_path / "got.pt", weights_only=False)
    for report, (name, plan) in zip(got, PLANS.items()):
        want = one_process_step(sequence_config(tiny_model_dir, plan["lora"]), plan["batch"])
        assert_same_step(report, want, name)


def test_a_sequence_size_that_does_not_split_the_heads_is_refused():
    """SmolLM2-135M's 9 query heads split over 3 or 9 ranks, not 2 or 4."""
    smollm2 = SimpleNamespace(num_attention_heads=9, num_key_value_heads=3)
    check_model(smollm2, 3, "sdpa")
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.mesh.sequence: 4 ranks "
        r"cannot split the model's 9 attention heads .* use one of \[3, 9\]$",
    ):
        check_model(smollm2, 4, "sdpa")
    with pytest.raises(
        ConfigError,
        match=r"^config error at model.attn_implementation: "
        r"sequence parallelism wraps sdpa or flash_attention_2, got eager$",
    ):
        check_model(smollm2, 3, "eager")


def test_the_launch_checks_the_model_against_the_sequence_groups(tiny_model_dir):
    """Before any rank starts: 3 sequence ranks cannot split the tiny model's 4 heads."""
    cfg = load_config(
        None,
        [
            f"model.model={tiny_model_dir}",
            "placement.kind=learner_group",
            "placement.ranks=3",
            "placement.mesh.sequence=3",
        ],
    )
    with pytest.raises(
        ConfigError,
        match=r"3 ranks cannot split the model's 4 attention "
        r"heads .* use one of \[2, 4\]$",
    ):
        check_launch(cfg)
