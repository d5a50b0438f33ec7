"""Fault isolation: environment crashes, hangs, kills, failed resets, failed generation and
dying actors each cost one episode with a logged reason and a defined reward, while the
learner trains to the end."""

import threading

from practicum.config import load_config
from practicum.store import EpisodeStore


def test_learner_trains_to_the_end_through_every_kind_of_fault(
    tiny_model_dir, tmp_path, monkeypatch, train_run, metric_rows
):
    """A chaos run: with the seeded fault plan the first dozen training episodes include a
    failed reset, a crashing step, a hang past the 1 s step timeout and a child that SIGKILLs
    itself; two actor threads also die from an injected bug."""
    from practicum.runtime.rollout import EpisodeBuilder

    calls, lock = [0], threading.Lock()
    real = EpisodeBuilder.run  # what an async actor calls for each episode

    def buggy(self, *args, **kwargs):
        with lock:
            calls[0] += 1
            n = calls[0]
        if n in (2, 5):
            raise RuntimeError("injected actor bug")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(EpisodeBuilder, "run", buggy)
    cfg = load_config(
        None,
        [
            f"model.model={tiny_model_dir}",
            "model.dtype=float32",
            "task.name=timed_bandit",
            "rollout.group_size=4",
            "rollout.tasks_per_step=2",
            "train.steps=3",
            "train.micro_batch_size=8",
            "eval.every=0",
            "task.options.eval_size=2",
            f"run.out_dir={tmp_path}",
            "runtime.mode=async",
            "runtime.num_actors=4",
            "sampling.max_new_tokens=6",
            "algo.mask_overlong=false",
            "rollout.failure_reward=-1.0",
            "task.options.time_scale=0.02",
            "task.options.fallback_arm=random",
            "task.options.step_timeout=1.0",
            "task.options.faults={reset_error: 0.1, step_error: 0.15, step_hang: 0.15, "
            "step_kill: 0.15}",
        ],
    )
    summary = train_run(cfg)
    assert summary["steps"] == cfg.train.steps
    stored = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    reasons = [e.failure for e in stored if e.failure]
    expected = {
        "reset": "reset failed: EnvFailure: env reset raised InjectedFault: injected fault: "
        "reset failed",
        "crash": "env step raised InjectedFault: injected fault: step crashed",
        "hang": "env step timed out after 1 s (child killed)",
        "kill": "env process died during step (killed by SIGKILL)",
        "actor": "actor died: RuntimeError: injected actor bug",
    }
    for kind, reason in expected.items():
        assert reason in reasons, f"no {kind} failure among {sorted(set(reasons))}"
    assert all(e.reward == -1.0 for e in stored if e.failure)
    assert summary["async"]["actor_restarts"] == 2
    assert metric_rows(cfg.run_dir)[-1]["actor_restarts"] == 2
