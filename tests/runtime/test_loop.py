"""The one training loop: a batch with nothing to train on is not a step; it is logged, warned
about, and too many in a row stop the run with a clear error (both runtimes)."""

import json

import pytest

from practicum.config import load_config
from practicum.errors import TrainingError
from practicum.store import read_ledger


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_batches_with_nothing_to_train_on_are_not_steps(
    tiny_model_dir, tmp_path, toy_overrides, train_run, mode, caplog
):
    """Every 4-token reply is cut by max_new_tokens, so with overlong masking on every episode
    is masked: no batch trains, no step counts, and the run stops after 3 such batches."""
    cfg = load_config(
        None,
        toy_overrides(
            tiny_model_dir,
            tmp_path,
            5,
            "algo.mask_overlong=true",
            "train.max_skipped_batches=3",
            f"runtime.mode={mode}",
            "runtime.num_actors=4",
            "runtime.max_staleness=0",
        ),
    )
    with pytest.raises(
        TrainingError,
        match=r"3 batches in a row had nothing to train on "
        r"\(every episode was masked out",
    ):
        train_run(cfg)
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    assert [(r["batch"], r["step"]) for r in rows] == [(1, 0), (2, 0), (3, 0)]
    assert all(r["filtered"] and not r["trained"] for r in rows)
    metrics = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("loss" not in m for m in metrics)  # no step was logged as trained
    assert sum("had nothing to train on" in r.message for r in caplog.records) == 3


def test_a_skipped_batch_does_not_stop_a_run_that_recovers(
    tiny_model_dir, tmp_path, toy_overrides, train_run, monkeypatch
):
    """One masked batch in the middle of a run: the run still reaches train.steps, and the
    summary counts the skipped batch."""
    import practicum.learner.step as learner_mod

    real, calls = learner_mod.Learner.train_step, [0]

    def once_empty(self, episodes):
        calls[0] += 1
        return None if calls[0] == 2 else real(self, episodes)

    monkeypatch.setattr(learner_mod.Learner, "train_step", once_empty)
    cfg = load_config(None, toy_overrides(tiny_model_dir, tmp_path, 3))
    summary = train_run(cfg)
    assert summary["steps"] == 3 and summary["skipped_batches"] == 1
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    assert [r["step"] for r in rows] == [1, 1, 2, 3] and not rows[1]["trained"]


class DropsWeights:
    """The run's sampler as vLLM beside the learner with full weights (sleep level 2): its
    weights are gone from each train step's start until a publish brings them back, and it
    samples nothing meanwhile."""

    def __init__(self, inner):
        self.inner, self.asleep, self.awaits_weights, self.loaded = inner, False, False, []

    @property
    def version(self) -> int:
        return self.inner.version

    def shares_trainable(self, adapter: bool) -> bool:
        return True

    def sleep(self) -> None:
        self.asleep = self.awaits_weights = True

    def wake_up(self) -> None:
        raise AssertionError("woken without its weights")

    def generate(self, *args, **kwargs):
        assert not self.asleep, "sampled without weights"
        return self.inner.generate(*args, **kwargs)

    def load_weights(self, update) -> None:
        self.inner.load_weights(update)
        self.loaded.append(update.version)
        self.asleep = self.awaits_weights = False

    def metrics(self):
        return self.inner.metrics()

    def summary(self):
        return self.inner.summary()

    def close(self) -> None:
        self.inner.close()


@pytest.mark.timeout(120)  # without that publish the next rollout waits for ever
def test_a_skipped_batch_still_brings_back_weights_a_sleeping_sampler_dropped(
    tiny_model_dir, tmp_path, toy_overrides, train_run, monkeypatch
):
    """The loop publishes the unchanged weights after a step that trained nothing when the
    sampler dropped its own for the step; otherwise the next rollout would wait forever."""
    import practicum.learner.step as learner_mod
    from practicum.runtime import session

    real, calls = learner_mod.Learner.train_step, [0]

    def once_empty(self, episodes):
        calls[0] += 1
        return None if calls[0] == 2 else real(self, episodes)

    real_place, wrapped = session.place, []

    def place_dropping(cfg, suite=None):
        placed = real_place(cfg, suite)
        placed.sampler = DropsWeights(placed.sampler)
        wrapped.append(placed.sampler)
        return placed

    monkeypatch.setattr(learner_mod.Learner, "train_step", once_empty)
    monkeypatch.setattr(session, "place", place_dropping)
    summary = train_run(load_config(None, toy_overrides(tiny_model_dir, tmp_path, 3)))
    assert summary["steps"] == 3 and summary["skipped_batches"] == 1
    assert wrapped[0].loaded == [1, 1, 2, 3]  # step 1, the skipped step's reload, 2, 3


@pytest.mark.parametrize("solves", [True, False])
def test_batches_all_solved_alike_end_training_as_converged(
    tiny_model_dir, tmp_path, toy_overrides, train_run, monkeypatch, solves
):
    """Every episode earns the same reward, so dynamic sampling filters every group. When all
    of them are solved the policy has nothing left to learn there: after
    train.max_skipped_batches such batches training ends as converged, with its final
    evaluation and summary; the same batches unsolved still stop the run with the error."""
    from practicum.envs.base import StepResult
    from practicum.envs.toy import LetterEnv

    monkeypatch.setattr(
        LetterEnv,
        "step",
        lambda self, action: StepResult(reward=1.0 if solves else 0.0, done=True, solved=solves),
    )
    cfg = load_config(
        None,
        toy_overrides(
            tiny_model_dir,
            tmp_path,
            5,
            "algo.dynamic_sampling=true",
            "algo.max_refill_rounds=0",
            "train.max_skipped_batches=2",
        ),
    )
    if not solves:
        with pytest.raises(TrainingError, match="2 batches in a row had nothing to train on"):
            train_run(cfg)
        return
    summary = train_run(cfg)
    assert summary["converged_at_step"] == 0 and summary["steps"] == 0
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    assert len(rows) == 2 and all(r["filtered"] and not r["trained"] for r in rows)
    assert (cfg.run_dir / "summary.json").exists()
    progress = (cfg.run_dir / "progress.log").read_text()
    assert "training converged at step 0" in progress
