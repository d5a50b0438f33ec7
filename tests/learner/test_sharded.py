"""learner/sharded.py: the learner over 2 real gloo processes (FSDP2) equals one process, and its
checkpoints (learner/checkpoint.py) resume exactly at any number of ranks."""

import socket

import pytest
import torch
from safetensors.torch import load_file

from practicum.errors import TrainingError
from practicum.learner import latest_checkpoint, read_trainer_state
from tests.ranks import (
    config,
    episodes,
    one_process_learner,
    optimizer_snapshot,
    poison_next_gradient,
    resume_and_train,
    rl_step,
    save_at_two_ranks,
    save_format_1,
    sft_batch,
    skip_a_poisoned_step,
    spawn,
    train_and_report,
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
        for key in (
            "loss",
            "kl_ref",
            "entropy",
            "logprob_gap",
            "grad_norm",
            "clip_frac",
            "train_tokens",
        ):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key
    mine, theirs = got["metrics"][2], metrics[2]  # SFT: cross-entropy, one update
    assert mine["updates"] == theirs["updates"] == 1 and "clip_frac" not in theirs
    for key in ("loss", "grad_norm", "train_tokens"):
        assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key


# -- checkpoints: saved at 2 ranks, resumed at 1, 3 and 4 (and 1 -> 2) ---------------------------
def configs(model_dir) -> dict:
    """LoRA (uneven batches) and full fine-tuning (even batches: the ranks' micro-batches hold
    the rows one process's do), with a warm-up so that the restored schedule matters."""
    return {
        name: config(model_dir, name == "lora", "train.warmup_steps=2") for name in ("lora", "full")
    }


@pytest.fixture(scope="module")
def straight(tiny_model_dir, tmp_path_factory):
    """Uninterrupted one-process runs of steps 1 to 3: step 3's metrics and the weights after
    it. The LoRA run also checkpoints step 2, in this format and in format 1."""
    root = tmp_path_factory.mktemp("straight")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    try:
        for name, cfg in configs(tiny_model_dir).items():
            learner = one_process_learner(cfg)
            for s in (1, 2, 3):
                metrics = rl_step(learner, episodes(s, even=name == "full"))
                if s == 2 and name == "lora":
                    out["checkpoints"] = [
                        learner.save(root / "now", {"seed": 2}),
                        save_format_1(learner, root / "format_1", {"seed": 2}),
                    ]
            out[name] = {"metrics": metrics, "weights": trainable_weights(learner)}
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory, straight):
    """One spawn of 2 ranks (`tests.ranks.save_at_two_ranks`): its report, and the folder that
    holds its checkpoints (lora/, full/) and the refused per-rank folders (node0/, node1/)."""
    root = tmp_path_factory.mktemp("two_ranks")
    cfgs = configs(tiny_model_dir)
    spawn(
        2,
        save_at_two_ranks,
        cfgs["lora"],
        cfgs["full"],
        root,
        straight["checkpoints"],
        root / "report.pt",
    )
    return torch.load(root / "report.pt", weights_only=False), root


def assert_same_step(metrics: dict, weights: dict, want: dict) -> None:
    """Step 3 as the uninterrupted one-process run took it: weights within 1e-6, same loss."""
    assert max_diff(weights, want["weights"]) < 1e-6
    assert metrics["loss"] == pytest.approx(want["metrics"]["loss"], rel=1e-6, abs=1e-9)
    assert metrics["lr"] == pytest.approx(want["metrics"]["lr"])


@pytest.mark.slow
def test_ranks_that_do_not_share_the_checkpoint_folder_are_refused(two_ranks):
    """Each rank was handed a folder of its own for the checkpoints, as two nodes with local
    disks would be: both refuse in one line naming the folder and who cannot see whom, and
    leave nothing behind."""
    report, root = two_ranks
    host = socket.gethostname()
    for rank, text in enumerate(report["refused"]):
        folder = root / f"node{rank}" / "checkpoints"
        assert text.startswith(f"checkpoint folder {folder} is not shared by the learner ranks")
        assert "\n" not in text
        assert f"rank {rank} ({host}) does not see the files of rank(s) [{1 - rank}]" in text
        assert not list(folder.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lora", "full"])
def test_a_checkpoint_saved_at_two_ranks_resumes_in_one_process(
    two_ranks, straight, tiny_model_dir, name
):
    _, root = two_ranks
    ckpt = latest_checkpoint(root / name)
    assert ckpt.name == "step_000002"
    assert sorted(p.name for p in (ckpt / "state").iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    ]  # each rank wrote its shards
    assert sorted(p.name for p in (ckpt / "rng").iterdir()) == ["rank_0.pt", "rank_1.pt"]
    assert (ckpt / "policy" / "policy.json").is_file()
    assert read_trainer_state(ckpt)["extra"] == {"seed": 2}
    learner = one_process_learner(configs(tiny_model_dir)[name])
    learner.load(ckpt)
    assert learner.step == 2
    saved = {}  # the ranks' gathered weights, as exported beside the shards
    for f in (ckpt / "policy").glob("*.safetensors"):
        saved.update(load_file(f))
    loaded = trainable_weights(learner)
    # the folder keeps a tied head once (its embedding), as transformers saves it
    assert set(loaded) - set(saved) <= {"lm_head.weight"} and saved.keys() <= loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    metrics = rl_step(learner, episodes(3, even=name == "full"))
    assert_same_step(metrics, trainable_weights(learner), straight[name])


@pytest.mark.slow
@pytest.mark.parametrize("world", [3, 4])
def test_a_checkpoint_saved_at_two_ranks_resumes_at_three_and_four_ranks(
    two_ranks, straight, tiny_model_dir, tmp_path, world
):
    """LoRA: the ranks split step 3's mini-batches of 5 rows 2/2/1 or 2/1/1/1."""
    _, root = two_ranks
    spawn(
        world,
        resume_and_train,
        configs(tiny_model_dir)["lora"],
        latest_checkpoint(root / "lora"),
        3,
        tmp_path / "got.pt",
    )
    got = torch.load(tmp_path / "got.pt", weights_only=False)
    assert got["step"] == 3
    assert_same_step(got["metrics"], got["weights"], straight["lora"])


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1], ids=["format_2", "format_1"])
def test_a_one_process_checkpoint_resumes_at_two_ranks(two_ranks, straight, index):
    """LoRA, into 2 ranks that had trained on (their state is replaced); format 1 is an earlier
    practicum's (the whole optimizer in one process's layout in trainer.pt)."""
    report, _ = two_ranks
    got = report["resumed"][index]
    assert got["step"] == 3
    assert_same_step(got["metrics"], got["weights"], straight["lora"])


@pytest.mark.slow
def test_a_nan_gradient_on_one_rank_skips_the_update_on_every_rank(tiny_model_dir, tmp_path):
    """Rank 1's gradient is NaN in step 2: both ranks skip that update (weights and optimizer
    state, step counts included, unchanged; counted once), step 3 trains; one process that
    skips the same step ends equal, and so does one that resumes the ranks' checkpoint taken
    right after the skipped step."""
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
    cfg = config(
        tiny_model_dir,
        True,
        "train.epochs=1",
        "train.mini_batches=1",
        "train.max_nonfinite_in_row=2",
    )
    learner = one_process_learner(cfg)
    rl_step(learner, episodes(1))
    poison_next_gradient(learner)
    assert rl_step(learner, episodes(2))["train/skipped_nonfinite"] == 1
    poison_next_gradient(learner)
    with pytest.raises(
        TrainingError,
        match=r"^2 optimizer updates in a row had a non-finite "
        r"gradient norm .* training step 3",
    ):
        rl_step(learner, episodes(3))
