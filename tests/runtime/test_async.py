"""Whole asynchronous runs on the tiny model with a timed bandit whose actions really take time:
every stored episode is consumed once; no trained token is staler than the bound, per sample;
streaming batches; a SIGKILLed run resumes without training anything twice; shutdown is prompt
with actors caught in a long sandboxed step or waiting for generation."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel

from practicum.config import load_config
from practicum.engine.base import SamplingParams
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.registry import Suite, SuiteContext, register_env
from practicum.runtime.groups import group_id
from practicum.store import EpisodeStore, read_ledger


def bandit_overrides(model_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    """Arms: fast ~0.02 s, slow ~0.2 s with lognormal tails; an unparsable reply runs a random
    arm, so rewards differ within groups. The tiny model's 6-token replies are all cut by
    max_new_tokens: overlong masking is off."""
    return [
        f"model.model={model_dir}",
        "model.dtype=float32",
        "task.name=timed_bandit",
        "rollout.group_size=4",
        "rollout.tasks_per_step=2",
        "train.steps=4",
        "train.micro_batch_size=8",
        "eval.every=0",
        "task.options.eval_size=2",
        f"run.out_dir={out_dir}",
        "runtime.mode=async",
        "runtime.num_actors=4",
        "sampling.max_new_tokens=6",
        "algo.mask_overlong=false",
        "task.options.time_scale=0.2",
        "task.options.fallback_arm=random",
        *extra,
    ]


def audit(run_dir: Path, max_staleness: int | None = None) -> tuple[list, list[dict]]:
    """Check the ledger against the store (every consumed position a stored episode, none
    consumed twice, no episode stored twice, staleness bounded); return (stored, ledger rows)."""
    stored = list(EpisodeStore(run_dir / "episodes.jsonl"))
    rows = read_ledger(run_dir / "consumed.jsonl")
    consumed = [
        (p, eid) for r in rows for k in ("trained", "filtered", "dropped") for p, eid in r[k]
    ]
    positions = [p for p, _ in consumed]
    assert len(positions) == len(set(positions))  # nothing consumed twice
    assert all(stored[p].episode_id == eid for p, eid in consumed)
    assert len({e.episode_id for e in stored}) == len(stored)
    if max_staleness is not None:  # every trained token, one by one
        for r in rows:
            version = r["step"] - 1  # the weights the update started from
            for p, _ in r["trained"]:
                for t in stored[p].turns:
                    assert 0 <= version - t.policy_version <= max_staleness, (r, p)
    return stored, rows


@pytest.mark.slow
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_admission_bounds_the_staleness_of_every_trained_token(
    tiny_model_dir, tmp_path, train_run, max_staleness
):
    cfg = load_config(
        None,
        bandit_overrides(
            tiny_model_dir,
            tmp_path,
            f"runtime.max_staleness={max_staleness}",
            "train.steps=6",
            "algo.max_refill_rounds=2",
        ),
    )  # filtered groups free room for new ones mid-batch
    summary = train_run(cfg)
    assert summary["steps"] == 6 and summary["mode"] == "async"
    stored, rows = audit(cfg.run_dir, max_staleness)
    by_group: dict[str, int] = {}
    for r in rows:
        for p, _ in r["trained"] + r["filtered"]:
            by_group[stored[p].group_id] = by_group.get(stored[p].group_id, 0) + 1
    assert set(by_group.values()) == {4}  # only complete groups reach the learner
    assert summary["async"]["num_actors"] == 4 and summary["async"]["actor_utilisation"] > 0


@pytest.mark.slow
def test_drop_policy_discards_stale_groups_instead(
    tiny_model_dir, tmp_path, train_run, metric_rows
):
    cfg = load_config(
        None,
        bandit_overrides(
            tiny_model_dir,
            tmp_path,
            "runtime.staleness_policy=drop",
            "runtime.max_staleness=0",
            "runtime.num_actors=6",
        ),
    )
    assert train_run(cfg)["steps"] == 4
    audit(cfg.run_dir, 0)
    assert all(r["staleness_max"] == 0 for r in metric_rows(cfg.run_dir))


@pytest.mark.slow
def test_streaming_trains_the_first_episodes_to_finish(
    tiny_model_dir, tmp_path, train_run, metric_rows
):
    # arms 10x apart at full scale: a group's episodes end far apart whatever the load adds
    cfg = load_config(
        None,
        bandit_overrides(
            tiny_model_dir,
            tmp_path,
            "rollout.batching=streaming",
            "runtime.max_staleness=1",
            "task.options.time_scale=1.0",
        ),
    )
    assert cfg.algo.advantage == "baseline" and not cfg.algo.duration_weights
    assert train_run(cfg)["steps"] == 4
    stored, rows = audit(cfg.run_dir, 1)
    assert all(len(r["trained"]) + len(r["dropped"]) >= 8 for r in rows)
    first = {stored[p].group_id for p, _ in rows[0]["trained"]}
    # single episodes, not whole groups: some batch holds part of a group
    sizes = [
        sum(stored[p].group_id == g for p, _ in r["trained"])
        for r in rows
        for g in {stored[p].group_id for p, _ in r["trained"]}
    ]
    assert first and any(n < 4 for n in sizes)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["admission", "drop"])
def test_sampling_goes_on_while_the_learner_trains_within_the_staleness_bound(
    tiny_model_dir, tmp_path, train_run, metric_rows, monkeypatch, policy
):
    """LoRA with a merged copy: the sampler runs weights of its own, so actors keep sampling
    while the learner trains (each train step made 0.4 s longer): generate calls start and end
    inside train steps, and still no trained token is staler than max_staleness."""
    from practicum.engine.hf_sampler import HFSampler
    from practicum.learner import Learner

    steps, calls = [], []
    train_step, generate = Learner.train_step, HFSampler.generate

    def slow_train_step(self, batch):
        t0 = time.perf_counter()
        out = train_step(self, batch)
        time.sleep(0.4)
        steps.append((t0, time.perf_counter()))
        return out

    def timed_generate(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = generate(self, *args, **kwargs)
        calls.append((t0, time.perf_counter()))
        return out

    monkeypatch.setattr(Learner, "train_step", slow_train_step)
    monkeypatch.setattr(HFSampler, "generate", timed_generate)
    cfg = load_config(
        None,
        bandit_overrides(
            tiny_model_dir,
            tmp_path,
            "model.lora=true",
            "model.merged_sampling=true",
            f"runtime.staleness_policy={policy}",
            "runtime.max_staleness=1",
        ),
    )
    assert train_run(cfg)["steps"] == 4 and len(steps) >= 4
    during = [c for c in calls if any(a < c[0] and c[1] < b for a, b in steps)]
    assert len(during) >= 2, (steps, calls)
    audit(cfg.run_dir, 1)
    assert all(r["staleness_max"] <= 1 for r in metric_rows(cfg.run_dir))


def test_sync_mode_runs_the_same_config(tiny_model_dir, tmp_path, train_run):
    cfg = load_config(
        None, bandit_overrides(tiny_model_dir, tmp_path, "runtime.mode=sync", "train.steps=1")
    )
    summary = train_run(cfg)
    assert summary["mode"] == "sync" and summary["steps"] == 1


def latest_state(run_dir: Path) -> dict | None:
    """The resume state of the run's latest checkpoint (plus its step), None before one."""
    root = run_dir / "checkpoints"
    try:
        state = torch.load(
            root / (root / "latest").read_text().strip() / "trainer.pt", weights_only=False
        )
    except (OSError, EOFError, RuntimeError):
        return None
    return {**state["extra"], "step": state["step"]}


def consumed_by(state: dict) -> set[int]:
    ledger = state["ledger"]
    return set(range(ledger["watermark"])) | set(ledger["consumed_beyond"])


@pytest.mark.slow
@pytest.mark.parametrize("batching", ["groups", "streaming"])
def test_killed_async_run_resumes_without_training_anything_twice(
    tiny_model_dir, tmp_path, batching
):
    """SIGKILL `practicum train ... runtime.mode=async` after its first checkpoint, run the same
    command again: every stored episode is consumed at most once, none below the final
    watermark is skipped, and training reaches the end. Streaming leaves groups open with some
    members consumed: the resume must not take those again."""
    args = [
        sys.executable,
        "-m",
        "practicum.cli",
        "train",
        "-q",
        *bandit_overrides(
            tiny_model_dir,
            tmp_path,
            "train.steps=6",
            "train.checkpoint_every=2",
            "task.options.time_scale=0.5",
            f"rollout.batching={batching}",
        ),
    ]
    run_dir = tmp_path / "default"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill once a checkpoint exists and the store holds episodes it has not consumed
        deadline = time.time() + 240
        while True:
            assert first.poll() is None, "the first run ended before it could be killed"
            assert time.time() < deadline, "no checkpoint within 240 s"
            state = latest_state(run_dir)
            if state and len(EpisodeStore(run_dir / "episodes.jsonl")) > len(consumed_by(state)):
                break
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    at_kill = latest_state(run_dir)
    pending = set(range(len(EpisodeStore(run_dir / "episodes.jsonl")))) - consumed_by(at_kill)
    assert pending
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 6
    stored, rows = audit(run_dir, None)
    assert [r["step"] for r in rows if r["trained"]] == [1, 2, 3, 4, 5, 6]
    final = latest_state(run_dir)
    open_groups = {group_id(i, t) for i, t, _ in final["source"]["open_groups"]}
    positions = {p for r in rows for k in ("trained", "filtered", "dropped") for p, _ in r[k]}
    # the resumed run consumed what the killed one had stored but not consumed, or keeps it
    # open for the next resume; the final checkpoint's view equals the ledger
    assert all(p in positions or stored[p].group_id in open_groups for p in pending)
    assert positions == consumed_by(final)
    assert all(stored[p].group_id in open_groups for p in range(len(stored)) if p not in positions)


# -- shutdown ----------------------------------------------------------------------------------
class SleeperOptions(BaseModel):
    pass


class SandboxSleeper(Env):
    """Each step runs a sandboxed program that sleeps for a minute; kill() cancels it (the
    sandbox's cancel event, as the mle environment does)."""

    resets: list = []
    steps: list = []
    """The sandbox's RunResult of every step, appended when it returns."""
    in_step = threading.Semaphore(0)

    def __init__(self, workdir: Path):
        self.workdir, self.cancel = workdir, threading.Event()

    def reset(self, task: Task, seed: int = 0) -> Start:
        SandboxSleeper.resets.append(task.task_id)
        return Start([{"role": "user", "content": "Wait."}])

    def step(self, action: str) -> StepResult:
        from practicum.envs.sandbox import Limits, run_python

        SandboxSleeper.in_step.release()
        run = run_python(
            "import time; time.sleep(60)",
            self.workdir,
            Limits(wall_seconds=120),
            cancel=self.cancel,
        )
        SandboxSleeper.steps.append(run)
        return StepResult("", reward=0.0, done=True)

    def kill(self) -> None:
        self.cancel.set()


def sleeper_suite(opts: SleeperOptions, ctx: SuiteContext) -> Suite:
    """Every step sleeps a minute in the sandbox."""

    def make(models):
        workdir = ctx.run_dir / "work" / os.urandom(4).hex()
        workdir.mkdir(parents=True)
        return SandboxSleeper(workdir)

    tasks = [Task(f"sleep/{i}") for i in range(4)]
    return Suite(make, tasks, tasks[:1])


def test_shutdown_is_prompt_with_actors_in_a_long_sandboxed_step_or_waiting_for_generation(
    tiny_model_dir, tmp_path, caplog
):
    """Two actors stuck in a minute-long sandboxed step, then (a fresh source) two actors
    waiting for generation while the learner holds the weights gate (as during an update):
    each time `stop()` returns within a couple of seconds, no actor thread is abandoned, the
    sandboxed runs were cancelled, and the episodes cut short are not stored: their group
    stays open, so a resume re-runs its slots (`AsyncBatches._actor`)."""
    from practicum.runtime.async_ import AsyncBatches
    from practicum.runtime.session import open_session

    register_env("sandbox_sleeper_test", SleeperOptions, sleeper_suite)
    cfg = load_config(
        None,
        [
            f"model.model={tiny_model_dir}",
            "model.dtype=float32",
            "model.lora=false",
            "task.name=sandbox_sleeper_test",
            "rollout.group_size=2",
            "rollout.tasks_per_step=1",
            "rollout.max_turns=1",
            "sampling.max_new_tokens=2",
            "runtime.mode=async",
            "runtime.num_actors=2",
            f"run.out_dir={tmp_path}",
        ],
    )
    s = open_session(cfg)
    caplog.set_level("WARNING", logger="practicum.runtime.actors")

    def stop_promptly(source: AsyncBatches, group: int) -> None:
        t0 = time.perf_counter()
        source.stop()
        assert time.perf_counter() - t0 < 3.0
        assert not any(st.thread.is_alive() for st in source.pool.states)
        assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
        assert len(s.store) == 0 and source.episodes_stored == 0
        assert [i for i, *_ in source.board.open_groups()] == [group]

    try:
        in_step = AsyncBatches(s)
        in_step.start()
        for _ in range(2):
            assert SandboxSleeper.in_step.acquire(timeout=60), "no actor reached its step"
        stop_promptly(in_step, 0)
        assert [r.killed_reason for r in SandboxSleeper.steps] == ["cancelled"] * 2

        waiting = AsyncBatches(s)
        with s.server.updating():  # no sampling meanwhile: actors wait in generate
            waiting.start()
            deadline = time.time() + 30
            while len(SandboxSleeper.resets) < 4:
                assert time.time() < deadline, "the actors did not start their episodes"
                time.sleep(0.02)
            time.sleep(0.2)  # from reset to the generate call
            stop_promptly(waiting, 1)  # the next task: nothing restored this source
        assert len(SandboxSleeper.steps) == 2  # no step ran after the stop
        # the server skipped the withdrawn requests and serves on (the final evaluation)
        sample, _ = s.server.generate([1, 2, 3], SamplingParams(max_new_tokens=2), seed=1)
        assert len(sample.token_ids) == 2
    finally:
        s.close()
