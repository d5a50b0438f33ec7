"""Session checkpoints carry the suite's own state, the cursor and the curriculum; model.init
starts from a saved adapter."""

from dataclasses import replace

import torch

import practicum.runtime.session as session_mod
from practicum.config import load_config
from practicum.runtime.session import open_session


def test_suite_state_cursor_and_curriculum_survive_a_checkpoint(
    tiny_model_dir, tmp_path, monkeypatch
):
    box = {"value": {"seen": ["a"]}}
    restored = []
    real_build = session_mod.build_suite

    def stateful(name, options, ctx):
        return replace(
            real_build(name, options, ctx),
            state=lambda: dict(box["value"]),
            load_state=restored.append,
        )

    monkeypatch.setattr(session_mod, "build_suite", stateful)
    over = [
        f"model.model={tiny_model_dir}",
        "model.dtype=float32",
        "task.name=toy",
        "task.options.train_size=8",
        "task.options.eval_size=2",
        f"run.out_dir={tmp_path}",
        "run.name=s",
        "curriculum.enabled=true",
    ]
    first = open_session(load_config(None, over))
    first.cursor.take(3)
    first.curriculum.tracker.update("toy/1", True)
    first.checkpoint()
    box["value"] = {"seen": ["a", "b"]}  # changes after the checkpoint are not in it
    first.close()

    again = open_session(load_config(None, over))
    again.close()
    assert restored == [{"seen": ["a"]}] and again.cursor.position == 3
    assert again.curriculum.tracker.attempts("toy/1") == 1


def test_model_init_starts_rl_from_a_saved_adapter(tiny_model_dir, tmp_path):
    over = [
        f"model.model={tiny_model_dir}",
        "model.dtype=float32",
        "task.name=toy",
        f"run.out_dir={tmp_path}",
    ]
    s = open_session(load_config(None, over + ["run.name=a"]))
    torch.manual_seed(0)
    for p in s.trainable.trainable_parameters():
        torch.nn.init.normal_(p, std=0.05)
    s.trainable.save(tmp_path / "adapter")
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = s.trainable.token_logprobs(x, torch.ones_like(x))
    s.close()
    t = open_session(load_config(None, over + ["run.name=b", f"model.init={tmp_path / 'adapter'}"]))
    with torch.no_grad():
        got = t.trainable.token_logprobs(x, torch.ones_like(x))
    t.close()
    assert torch.allclose(got, want, atol=1e-6)
