"""Session checkpoints carry the task suite's own state (e.g. the MLE solution buffer)."""

from dataclasses import replace

import practicum.runtime.session as session_mod
from practicum.config import load_config
from practicum.runtime.session import open_session
from practicum.suites import load_suite


def test_suite_state_survives_a_checkpoint_and_resume(tiny_model_dir, tmp_path, monkeypatch):
    box = {"value": {"seen": ["a"]}}
    restored = []

    def stateful_suite(cfg):
        return replace(load_suite(cfg), state=lambda: dict(box["value"]),
                       load_state=restored.append)

    monkeypatch.setattr(session_mod, "load_suite", stateful_suite)
    over = [f"model.model={tiny_model_dir}", "model.dtype=float32", "task.name=toy",
            "task.train_size=8", "task.eval_size=2", f"run.out_dir={tmp_path}", "run.name=s"]
    first = open_session(load_config(None, over))
    first.checkpoint()
    box["value"] = {"seen": ["a", "b"]}  # changes after the checkpoint are not in it
    first.metrics.close()

    open_session(load_config(None, over + ["run.resume=true"])).metrics.close()
    assert restored == [{"seen": ["a"]}]
