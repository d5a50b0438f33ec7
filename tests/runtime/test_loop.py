"""The one training loop: a batch with nothing to train on is not a step; it is logged, warned
about, and too many in a row stop the run with a clear error (both runtimes)."""

import json

import pytest

from practicum.config import load_config
from practicum.errors import TrainingError
from practicum.store import read_ledger


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_batches_with_nothing_to_train_on_are_not_steps(tiny_model_dir, tmp_path, toy_overrides,
                                                        train_run, mode, caplog):
    """Every 4-token reply is cut by max_new_tokens, so with overlong masking on every episode
    is masked: no batch trains, no step counts, and the run stops after 3 such batches."""
    cfg = load_config(None, toy_overrides(
        tiny_model_dir, tmp_path, 5, "algo.mask_overlong=true", "train.max_skipped_batches=3",
        f"runtime.mode={mode}", "runtime.num_actors=4", "runtime.max_staleness=0"))
    with pytest.raises(TrainingError, match=r"3 batches in a row had nothing to train on "
                                            r"\(every episode was masked out"):
        train_run(cfg)
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    assert [(r["batch"], r["step"]) for r in rows] == [(1, 0), (2, 0), (3, 0)]
    assert all(r["filtered"] and not r["trained"] for r in rows)
    metrics = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("loss" not in m for m in metrics)  # no step was logged as trained
    assert sum("had nothing to train on" in r.message for r in caplog.records) == 3


def test_a_skipped_batch_does_not_stop_a_run_that_recovers(tiny_model_dir, tmp_path,
                                                          toy_overrides, train_run, monkeypatch):
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
