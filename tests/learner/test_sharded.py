"""learner/sharded.py: the learner over 2 real gloo processes (FSDP2) equals one process, and its
checkpoints resume exactly onto any number of ranks."""

import pytest
import torch

from tests.ranks import (
    config,
    episodes,
    one_process_learner,
    spawn,
    train_and_report,
    train_save_resume,
    trainable_weights,
)

SEEDS = [1, 2]
"""Two training steps, each 2 epochs x 2 mini-batches = 4 optimizer updates."""


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread here, as in each rank: a matmul split over other threads sums in
    another order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def one_process(cfg, seeds=SEEDS, even=False):
    learner = one_process_learner(cfg)
    metrics = [learner.train_step(episodes(s, even)) for s in seeds]
    return learner, metrics


@pytest.mark.slow
@pytest.mark.parametrize("lora, even", [(True, False), (False, True)], ids=["lora", "full"])
def test_two_ranks_train_as_one_process(tiny_model_dir, tmp_path, lora, even):
    """LoRA on a batch the ranks split unevenly (3 / 2 rows; one rank pads with a weightless
    micro-batch); full fine-tuning on a batch whose micro-batches hold the same rows on the
    ranks as in one process. Equal to 1e-6, or within one process's own rounding: the tied
    output embedding's rows for tokens never sampled get gradients that are sums of
    cancelling terms, and AdamW scales such a near-zero gradient up to ~lr, so the same
    process with 2 threads instead of 1 already ends ~1e-6 away."""
    cfg = config(tiny_model_dir, lora)
    spawn(2, train_and_report, cfg, SEEDS, tmp_path / "ranks.pt", even)
    got = torch.load(tmp_path / "ranks.pt", weights_only=False)
    learner, metrics = one_process(cfg, even=even)
    want = trainable_weights(learner)
    torch.set_num_threads(2)
    rounding = max_diff(trainable_weights(one_process(cfg, even=even)[0]), want)
    torch.set_num_threads(1)
    start = trainable_weights(one_process_learner(cfg))
    assert max_diff(want, start) > 1e-4  # 8 updates moved the weights
    assert max_diff(got["weights"], want) < max(1e-6, 2 * rounding)
    assert got["step"] == learner.step == 2
    for mine, theirs in zip(got["metrics"], metrics):
        assert mine["updates"] == theirs["updates"] == 4
        assert theirs["kl_ref"] > 0 and theirs["grad_norm"] > cfg.train.grad_clip  # clipped
        for key in ("loss", "kl_ref", "entropy", "logprob_gap", "grad_norm", "clip_frac",
                    "train_tokens"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key


@pytest.mark.slow
def test_a_checkpoint_resumes_exactly_from_two_ranks_onto_one_and_back(tiny_model_dir, tmp_path):
    """The ranks stop after step 2's checkpoint (as if killed during step 3); one process
    resumes it, and two ranks resume a one-process checkpoint: both end where an uninterrupted
    run ends (LoRA; optimizer moments, schedule and step restored)."""
    from practicum.learner import latest_checkpoint

    cfg = config(tiny_model_dir, True, "train.warmup_steps=2")  # the schedule matters
    spawn(2, train_save_resume, cfg, tmp_path / "ranks", [1, 2], None, tmp_path / "a.pt")
    ranks_ckpt = latest_checkpoint(tmp_path / "ranks")
    assert ranks_ckpt.name == "step_000002" and (ranks_ckpt / "policy" / "policy.json").is_file()

    straight = one_process_learner(cfg)
    for s in (1, 2, 3):
        straight.train_step(episodes(s))
        if s == 2:
            straight.save(tmp_path / "one", {})
    want = trainable_weights(straight)

    resumed = one_process_learner(cfg)  # 2 ranks -> 1 process
    resumed.load(ranks_ckpt)
    assert resumed.step == 2
    resumed.train_step(episodes(3))
    assert max_diff(trainable_weights(resumed), want) < 1e-6

    spawn(2, train_save_resume, cfg, tmp_path / "ranks_b", [3],  # 1 process -> 2 ranks
          latest_checkpoint(tmp_path / "one"), tmp_path / "b.pt")
    got = torch.load(tmp_path / "b.pt", weights_only=False)
    assert got["step"] == 3
    assert max_diff(got["weights"], want) < 1e-6
