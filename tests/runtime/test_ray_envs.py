"""Environments in Ray actors (`placement.envs`) on a local Ray, SIGKILLed mid-step during real
tiny-model training runs (sync and async). The run trains to the end, the killed worker's
episode is stored as a logged failure, every finished episode is in the store, the ledger
consumes nothing twice, and a resumed run continues where the checkpoint left off."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from practicum.config import load_config
from practicum.envs.registry import Suite, SuiteContext
from practicum.errors import ConfigError
from tests.runtime.test_async import audit

STEP_SECONDS = 0.3


pytestmark = pytest.mark.usefixtures("local_ray")


def ray_overrides(model_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    """The timed bandit in-process (no child per episode: the Ray worker is the process that
    dies), every step a constant STEP_SECONDS, an unparsable reply runs a random arm."""
    arms = (
        f"{{a: {{reward: 0.0, seconds: {STEP_SECONDS}}}, "
        f"b: {{reward: 1.0, seconds: {STEP_SECONDS}}}}}"
    )
    return [
        f"model.model={model_dir}",
        "model.dtype=float32",
        "task.name=timed_bandit",
        "task.options.process=false",
        f"task.options.arms={arms}",
        "task.options.sigma=0",
        "task.options.fallback_arm=random",
        "task.options.eval_size=2",
        "rollout.group_size=2",
        "rollout.tasks_per_step=2",
        "train.steps=2",
        "train.checkpoint_every=1",
        "train.micro_batch_size=4",
        "eval.every=0",
        "sampling.max_new_tokens=4",
        "algo.mask_overlong=false",
        "algo.dynamic_sampling=false",
        "rollout.failure_reward=-1.0",
        "placement.kind=ray",
        f"run.out_dir={out_dir}",
        *extra,
    ]


class Killer:
    """Captures the run's env pool and SIGKILLs the process of one worker caught in the middle
    of a training step (after `after` episodes are stored)."""

    def __init__(self, monkeypatch, run_dir: Path, after: int):
        import practicum.runtime.ray_envs as ray_envs

        self.pools, self.killed = [], []
        real = ray_envs.RayEnvPool.__init__

        def capture(pool, *args, **kwargs):
            real(pool, *args, **kwargs)
            self.pools.append(pool)

        monkeypatch.setattr(ray_envs.RayEnvPool, "__init__", capture)
        self.store = run_dir / "episodes.jsonl"
        self.after = after
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _stored(self) -> int:
        return len(self.store.read_text().splitlines()) if self.store.exists() else 0

    def _run(self) -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not self.killed:
            time.sleep(0.02)
            if not self.pools or self._stored() < self.after:
                continue
            # a step started less than half its length ago is surely still running
            busy = [
                w
                for w in self.pools[-1].busy()
                if w.op == "step" and time.perf_counter() - w.since < STEP_SECONDS / 2
            ]
            if busy:
                os.kill(busy[0].pid, signal.SIGKILL)
                self.killed.append(busy[0].pid)


@pytest.mark.slow
def test_a_sigkilled_worker_in_a_sync_run_costs_one_logged_episode_and_resume_continues(
    tiny_model_dir, tmp_path, monkeypatch, train_run, metric_rows
):
    cfg = load_config(None, ray_overrides(tiny_model_dir, tmp_path, "train.steps=3"))
    killer = Killer(monkeypatch, cfg.run_dir, after=4)  # in the second batch
    summary = train_run(cfg)
    assert len(killer.killed) == 1
    assert summary["steps"] == 3 and summary["placement"] == "ray"
    stored, rows = audit(cfg.run_dir)
    assert len(stored) == 12  # 3 batches x 2 groups x 2 episodes: none lost
    failures = [e for e in stored if e.failure]
    assert len(failures) == 1 and failures[0].info["batch"] >= 2
    # 4 started with the session; a batch after the kill needed a fresh one
    assert summary["ray"]["workers_died"] == 1
    assert summary["ray"]["workers_started"] == 4 + (failures[0].info["batch"] < 3)
    died = [r["ray_workers_died"] for r in metric_rows(cfg.run_dir)]
    assert died == [float(step >= failures[0].info["batch"]) for step in (1, 2, 3)]
    assert failures[0].failure == (
        f"env worker died during step (pid {killer.killed[0]}: ActorDiedError)"
    )
    assert failures[0].reward == -1.0
    assert sorted(p for r in rows for p, _ in r["trained"]) == list(range(12))
    # every worker that ran an episode was a separate process from the driver
    assert killer.killed[0] != os.getpid()

    resumed = train_run(load_config(None, ray_overrides(tiny_model_dir, tmp_path, "train.steps=4")))
    assert resumed["steps"] == 4 and resumed["ray"]["workers_died"] == 0
    stored, rows = audit(cfg.run_dir)
    assert len(stored) == 16 and [r["step"] for r in rows] == [1, 2, 3, 4]
    # the cursor continued: batch 4 drew the 7th and 8th tasks, not any drawn before
    groups = [sorted({stored[p].group_id.split("/")[0] for p, _ in r["trained"]}) for r in rows]
    assert groups == [["g0", "g1"], ["g2", "g3"], ["g4", "g5"], ["g6", "g7"]]


@pytest.mark.slow
def test_a_sigkilled_worker_in_an_async_run_is_replaced(
    tiny_model_dir, tmp_path, monkeypatch, train_run
):
    cfg = load_config(
        None,
        ray_overrides(
            tiny_model_dir, tmp_path, "runtime.mode=async", "runtime.num_actors=3", "train.steps=3"
        ),
    )
    killer = Killer(monkeypatch, cfg.run_dir, after=2)
    summary = train_run(cfg)
    assert len(killer.killed) == 1
    assert summary["steps"] == 3 and summary["mode"] == "async"
    assert summary["ray"]["workers_died"] == 1
    stored, rows = audit(cfg.run_dir)
    reasons = [e.failure for e in stored if e.failure]
    assert reasons == [f"env worker died during step (pid {killer.killed[0]}: ActorDiedError)"]
    trained = [p for r in rows for p, _ in r["trained"]]
    assert len(trained) == 3 * 2 * 2
    # every stored episode is accounted for: consumed, or in a group still open at the end
    assert len(stored) >= len(trained)


def test_ray_options_are_checked():
    with pytest.raises(
        ConfigError,
        match="^config error at placement.address: unknown key for placement.kind=local",
    ):
        load_config(None, ["placement.address=auto"])
    from practicum.runtime.ray_envs import use_ray

    stateful = Suite(lambda models: None, [], [], state=dict, load_state=lambda s: None)
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.envs: environment 'mle' "
        r"keeps state .* set placement.envs: null",
    ):
        use_ray(stateful, "mle", {}, SuiteContext())


@pytest.mark.slow
def test_env_model_calls_cross_the_wire_and_episodes_match_envs_in_this_process(
    tiny_model_dir, tmp_path
):
    """AgentFlow's generator role calls the live policy through the model service: under Ray
    the call goes from the worker to the driver and back. Greedy held-out episodes are the
    same as with the environments in this process."""
    from practicum.runtime.session import open_session

    results = {}
    for kind in ("local", "ray"):
        cfg = load_config(
            None,
            [
                f"model.model={tiny_model_dir}",
                "model.dtype=float32",
                "task.name=flow",
                "task.options.families={arithmetic: 1}",
                "task.options.tools=[calculator, lookup]",
                "task.options.train_size=4",
                "task.options.eval_per_family=2",
                "task.options.max_steps_eval=1",
                "task.options.analyst=rules",
                "task.options.executor=rules",
                "task.options.verifier=rules",
                "task.options.generator=base",
                "task.options.generator_tokens=6",
                "sampling.max_new_tokens=8",
                "rollout.group_size=2",
                "rollout.tasks_per_step=1",
                f"placement.kind={kind}",
                f"run.out_dir={tmp_path}",
                f"run.name={kind}",
            ],
        )
        s = open_session(cfg)
        try:
            s.evaluate("held_out")
            pool = s.placement.envs and s.placement.envs.summary()["ray"]
        finally:
            s.close()
        results[kind] = json.loads((cfg.run_dir / "eval" / "held_out.json").read_text())
        if kind == "ray":
            assert pool["model_calls"] >= 2 and pool["workers_started"] == 2
    local, remote = results["local"]["episodes"], results["ray"]["episodes"]
    assert len(local) == 2 and all(e["failure"] is None for e in remote)
    assert remote == local


def test_env_errors_in_a_worker_end_one_episode_and_the_worker_lives_on():
    """A raising reset or step fails its episode (the same reasons as a local child process);
    the worker survives and serves the next episodes."""
    from practicum.envs.base import Task
    from practicum.envs.process_env import EnvFailure
    from practicum.envs.registry import build_suite
    from practicum.runtime.ray_envs import use_ray

    results = {}
    for fault in ("reset_error", "step_error"):
        opts = {"process": False, "time_scale": 0.0, "faults": {fault: 1.0}}
        ctx = SuiteContext(failure_reward=-1.0)
        suite = build_suite("timed_bandit", opts, ctx)
        pool = use_ray(suite, "timed_bandit", opts, ctx, warm=1)
        try:
            for seed in range(3):
                env = suite.make_env(None)
                try:
                    env.reset(Task("bandit/train/0"), seed)
                    results.setdefault(fault, []).append(env.step("fast"))
                except EnvFailure as e:
                    results.setdefault(fault, []).append(str(e))
                finally:
                    env.close()
            assert pool.summary()["ray"]["workers_started"] == 1 and pool.started == 1
        finally:
            pool.close()
    assert (
        results["reset_error"]
        == ["env reset raised InjectedFault: injected fault: reset failed"] * 3
    )
    steps = results["step_error"]
    assert [(r.done, r.reward, r.failure) for r in steps] == [
        (True, -1.0, "env step raised InjectedFault: injected fault: step crashed")
    ] * 3


def test_a_worker_killed_between_episodes_is_replaced_before_the_next_reset():
    from practicum.envs.base import Task
    from practicum.envs.registry import build_suite
    from practicum.runtime.ray_envs import use_ray

    opts = {"process": False, "time_scale": 0.0, "fallback_arm": "random"}
    suite = build_suite("timed_bandit", opts, SuiteContext())
    pool = use_ray(suite, "timed_bandit", opts, SuiteContext(), warm=1)
    try:
        os.kill(pool.workers[0].pid, signal.SIGKILL)
        env = suite.make_env(None)
        env.reset(Task("bandit/train/0"), 0)
        result = env.step("fast")
        env.close()
        assert result.done and result.failure is None and result.reward == 0.3
        assert pool.summary()["ray"]["workers_died"] == 1 and pool.started == 2
        assert len(pool.workers) == 1 and env.worker is None
    finally:
        pool.close()


def test_a_step_that_hangs_past_the_call_timeout_ends_its_episode_and_the_worker_is_replaced():
    """A real env step that sleeps 60 s under a 1 s call timeout: the episode ends as a logged
    failure at the timeout, the worker process is killed, the next episode gets a fresh one."""
    from practicum.envs.base import Task
    from practicum.envs.registry import build_suite
    from practicum.runtime.ray_envs import use_ray

    opts = {
        "process": False,
        "sigma": 0.0,
        "arms": {"fast": {"reward": 0.3, "seconds": 0.0}, "hang": {"reward": 1.0, "seconds": 60.0}},
    }
    ctx = SuiteContext(failure_reward=-1.0)
    suite = build_suite("timed_bandit", opts, ctx)
    pool = use_ray(suite, "timed_bandit", opts, ctx, warm=1, call_timeout=1.0)
    try:
        env = suite.make_env(None)
        env.reset(Task("bandit/train/0"), 0)
        pid = env.worker.pid
        start = time.perf_counter()
        result = env.step("hang")
        waited = time.perf_counter() - start
        env.close()
        assert (result.done, result.reward) == (True, -1.0)
        assert result.failure == f"env step timed out after 1 s (pid {pid}, killed)"
        assert 1.0 <= waited < 30
        assert pool.summary()["ray"]["workers_died"] == 1 and pool.workers == []
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the hung worker (pid {pid}) still runs")
        env = suite.make_env(None)
        env.reset(Task("bandit/train/1"), 1)
        result = env.step("fast")
        env.close()
        assert result.failure is None and result.reward == 0.3 and pool.started == 2
    finally:
        pool.close()
