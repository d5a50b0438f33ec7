"""learner/sharded.py: the learner over 2 real gloo processes (FSDP2) equals one process, and its
checkpoints resume exactly onto any number of ranks."""

import pytest
import torch

from practicum.errors import TrainingError

from tests.ranks import (
    optimizer_snapshot,
    poison_next_gradient,
    rl_step,
    sft_batch,
    skip_a_poisoned_step,
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
    """RL steps on `seeds`, then an SFT step, as `train_and_report` runs them on ranks."""
    learner = one_process_learner(cfg)
    metrics = [rl_step(learner, episodes(s, even)) for s in seeds]
    metrics.append(learner.train_step(sft_batch(9)))
    return learner, metrics


@pytest.mark.slow
@pytest.mark.parametrize("lora, even", [(True, False), (False, True)], ids=["lora", "full"])
def test_two_ranks_train_as_one_process(tiny_model_dir, tmp_path, lora, even):
    """Two RL steps then one SFT step (cross-entropy through the same `train_step`).
    LoRA on a batch the ranks split unevenly (3 / 2 rows; one rank pads with a weightless
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
    assert got["step"] == learner.step == 3
    for mine, theirs in zip(got["metrics"][:2], metrics[:2]):  # RL
        assert mine["updates"] == theirs["updates"] == 4
        assert theirs["kl_ref"] > 0 and theirs["grad_norm"] > cfg.train.grad_clip  # clipped
        for key in ("loss", "kl_ref", "entropy", "logprob_gap", "grad_norm", "clip_frac",
                    "train_tokens"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key
    mine, theirs = got["metrics"][2], metrics[2]  # SFT: cross-entropy, one update
    assert mine["updates"] == theirs["updates"] == 1 and "clip_frac" not in theirs
    for key in ("loss", "grad_norm", "train_tokens"):
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
        rl_step(straight, episodes(s))
        if s == 2:
            straight.save(tmp_path / "one", {})
    want = trainable_weights(straight)

    resumed = one_process_learner(cfg)  # 2 ranks -> 1 process
    resumed.load(ranks_ckpt)
    assert resumed.step == 2
    rl_step(resumed, episodes(3))
    assert max_diff(trainable_weights(resumed), want) < 1e-6

    spawn(2, train_save_resume, cfg, tmp_path / "ranks_b", [3],  # 1 process -> 2 ranks
          latest_checkpoint(tmp_path / "one"), tmp_path / "b.pt")
    got = torch.load(tmp_path / "b.pt", weights_only=False)
    assert got["step"] == 3
    assert max_diff(got["weights"], want) < 1e-6


@pytest.mark.slow
def test_a_nan_gradient_on_one_rank_skips_the_update_on_every_rank(tiny_model_dir, tmp_path):
    """Rank 1's gradient is NaN in step 2: both ranks skip that update (weights and optimizer
    state, step counts included, unchanged; counted once), step 3 trains; one process that
    skips the same step ends equal, and so does one that resumes the ranks' checkpoint taken
    right after the skipped step."""
    from practicum.learner import latest_checkpoint

    cfg = config(tiny_model_dir, True, "train.epochs=1", "train.mini_batches=1")
    spawn(2, skip_a_poisoned_step, cfg, tmp_path / "ckpt", tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    got = ranks[0]
    assert all(r["optimizer_unchanged"] for r in ranks)
    assert max_diff(got["after_skip"], got["weights"]) == 0.0
    assert got["skipped"]["train/skipped_nonfinite"] == 1.0
    assert got["skipped"]["grad_norm"] != got["skipped"]["grad_norm"]  # NaN, reported
    assert got["trained"]["train/skipped_nonfinite"] == 1.0 and got["step"] == 3
    assert max_diff(got["final"], got["after_skip"]) > 1e-6  # step 3 trained

    straight = one_process_learner(cfg)
    rl_step(straight, episodes(1))
    moments = optimizer_snapshot(straight)
    poison_next_gradient(straight)
    rl_step(straight, episodes(2))
    assert all(torch.equal(a, b) for a, b in zip(moments, optimizer_snapshot(straight)))
    rl_step(straight, episodes(3))
    want = trainable_weights(straight)
    assert max_diff(got["final"], want) < 1e-6

    resumed = one_process_learner(cfg)
    resumed.load(latest_checkpoint(tmp_path / "ckpt"))
    assert resumed.step == 2 and resumed.skipped_nonfinite == 1
    rl_step(resumed, episodes(3))
    assert max_diff(trainable_weights(resumed), want) < 1e-6


def test_non_finite_updates_in_a_row_stop_the_run_naming_the_step(tiny_model_dir):
    cfg = config(tiny_model_dir, True, "train.epochs=1", "train.mini_batches=1",
                 "train.max_nonfinite_in_row=2")
    learner = one_process_learner(cfg)
    rl_step(learner, episodes(1))
    poison_next_gradient(learner)
    assert rl_step(learner, episodes(2))["train/skipped_nonfinite"] == 1
    poison_next_gradient(learner)
    with pytest.raises(TrainingError, match=r"^2 optimizer updates in a row had a non-finite "
                                            r"gradient norm .* training step 3"):
        rl_step(learner, episodes(3))
