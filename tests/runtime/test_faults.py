"""Fault isolation: environment crashes, hangs, kills, failed resets, unparsable actions, failed
generation and dying actors each cost one episode with a logged reason and a defined reward,
while the learner trains to the end."""

import json
import threading
from functools import partial
from pathlib import Path

import pytest

from practicum.config import load_config
from practicum.engine.base import Sample
from practicum.engine.chat import ChatFormat
from practicum.envs.base import Task
from practicum.envs.process_env import ProcessEnv
from practicum.envs.timed_bandit import BanditSpec, TimedBanditEnv
from practicum.runtime.rollout import RolloutLimits, run_episode
from practicum.runtime.store import EpisodeStore


def tiny_overrides(model_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    return [f"model.model={model_dir}", "model.dtype=float32", "task.name=timed_bandit",
            "rollout.group_size=4", "rollout.tasks_per_step=2", "train.steps=3",
            "train.micro_batch_size=8", "eval.every=0", "task.eval_size=2",
            f"run.out_dir={out_dir}", "runtime.mode=async", "runtime.num_actors=4",
            "sampling.max_new_tokens=6", *extra]


def metric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r or "skipped" in r]


@pytest.fixture(scope="module")
def chat(tiny_model_dir):
    from transformers import AutoTokenizer

    return ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))


def scripted(chat, text: str):
    ids = chat.encode(text)
    return lambda _ids: (Sample(ids, [-1.0] * len(ids), text, "stop"), 7)


def test_unparsable_action_ends_the_episode_with_the_failure_reward(chat):
    env = ProcessEnv(partial(TimedBanditEnv, BanditSpec(process=False, failure_reward=-1.0)))
    ep = run_episode(env, Task("t"), "g0/t", chat, RolloutLimits(failure_reward=-1.0),
                     scripted(chat, "I refuse to choose"))
    assert ep.failure.startswith("unparsable action") and ep.reward == -1.0
    assert len(ep.turns) == 1 and ep.turns[0].policy_version == 7
    assert env.pid is None  # the episode's child is gone


def test_failed_generation_ends_only_that_episode(chat):
    def broken(_ids):
        raise RuntimeError("CUDA out of memory (pretend)")

    env = TimedBanditEnv(BanditSpec(process=False))
    ep = run_episode(env, Task("t"), "g0/t", chat, RolloutLimits(failure_reward=-0.5), broken)
    assert ep.failure == "generation failed: RuntimeError: CUDA out of memory (pretend)"
    assert ep.reward == -0.5 and ep.turns == []


def test_a_parsable_action_runs_and_records_its_duration(chat):
    env = TimedBanditEnv(BanditSpec(process=False, time_scale=0.05))
    ep = run_episode(env, Task("t"), "g0/t", chat, RolloutLimits(), scripted(chat, "<choice>slow</choice>"))
    assert ep.failure is None and ep.reward == 1.0 and ep.turns[0].env_duration > 0


def test_learner_trains_to_the_end_through_every_kind_of_fault(tiny_model_dir, tmp_path,
                                                                monkeypatch):
    """A chaos run: with the seeded fault plan the first dozen training episodes include a
    failed reset, a crashing step, a hang past the 1 s step timeout and a child that SIGKILLs
    itself; two actor threads also die from an injected bug."""
    import practicum.runtime.async_ as async_

    calls, lock = [0], threading.Lock()
    real = async_.run_episode

    def buggy(*args, **kwargs):
        with lock:
            calls[0] += 1
            n = calls[0]
        if n in (2, 5):
            raise RuntimeError("injected actor bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(async_, "run_episode", buggy)
    faults = "{reset_error: 0.1, step_error: 0.15, step_hang: 0.15, step_kill: 0.15}"
    cfg = load_config(None, tiny_overrides(
        tiny_model_dir, tmp_path, "rollout.failure_reward=-1.0",
        f"task.options={{time_scale: 0.02, fallback_arm: random, step_timeout: 1.0, "
        f"faults: {faults}}}"))
    from practicum.runtime.session import open_session

    s = open_session(cfg)
    summary = async_.run_async(s, progress=False)
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
