"""One sandboxed run per distinct program (`run_cache`): copies share the first run's outcome,
wait for it rather than start their own, and never inherit a run that was cut short or that
belongs to another competition."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from practicum.envs.base import Task
from practicum.envs.mle.run_cache import RunCache
from tests.envs.mle.test_env import IRIS, SERVICE, make_suite

WINE = Task("wine-cultivar", {"competition": "wine-cultivar", "split": "train"})
REPLY = "model = LogisticRegression(max_iter=500)"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mle-run-cache-data")


def test_copies_arriving_together_share_one_run():
    cache, calls = RunCache(), []

    def slow_run():
        calls.append(1)
        time.sleep(0.5)
        return {"score": 0.9}, True

    got = []
    threads = [
        threading.Thread(target=lambda: got.append(cache.outcome("k", slow_run))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and (cache.runs, cache.reused) == (1, 3)
    assert sorted(reused for _, reused in got) == [False, True, True, True]
    assert all(outcome == {"score": 0.9} for outcome, _ in got)


def test_a_run_that_may_not_be_kept_is_run_again_and_copies_are_independent():
    cache, calls = RunCache(), []

    def cut_short():
        calls.append(1)
        return {"crash": "killed (timeout)"}, False

    cache.outcome("k", cut_short)
    cache.outcome("k", cut_short)
    assert len(calls) == 2 and cache.reused == 0
    first, _ = cache.outcome("j", lambda: ({"milestones": ["a"]}, True))
    first["milestones"].append("forged")  # a caller changing its copy changes no other copy
    again, reused = cache.outcome("j", lambda: ({}, True))
    assert reused and again == {"milestones": ["a"]}


def test_a_waiting_copy_stops_when_cancelled_and_the_oldest_entry_leaves_first():
    cache, cancel, release = RunCache(max_entries=2), threading.Event(), threading.Event()
    owner = threading.Thread(target=lambda: cache.outcome("k", lambda: (release.wait(10), True)))
    owner.start()
    time.sleep(0.2)
    threading.Timer(0.3, cancel.set).start()
    assert cache.outcome("k", lambda: ({}, True), cancel) is None
    release.set()
    owner.join()
    for key in ("a", "b"):
        cache.outcome(key, lambda: ({}, True))
    assert cache.outcome("k", lambda: ("rerun", True)) == ("rerun", False)


def test_the_same_program_runs_once_per_competition(data_root):
    suite = make_suite(data_root, mode="template", reuse_runs=True, train=["wine-cultivar"])
    cache = suite.make_env.runs
    results = []
    for task in (IRIS, IRIS, WINE):
        env = suite.make_env(SERVICE)
        env.reset(task, seed=0)
        results.append(env.step(REPLY))
        env.close()
    first, copy, other = results
    assert first.info["valid"] and first.metrics["reused_runs"] == 0.0
    assert copy.metrics["reused_runs"] == 1.0
    assert (copy.reward, copy.info["score"], copy.duration) == (
        first.reward,
        first.info["score"],
        first.duration,
    )
    # another competition's data makes another program run: never the iris outcome
    assert other.metrics["reused_runs"] == 0.0 and other.info["score"] != first.info["score"]
    assert (cache.runs, cache.reused) == (2, 1)


def test_a_run_killed_at_its_time_limit_is_not_handed_on(data_root):
    """A run killed at the wall limit may be the machine's load, not the code: each copy runs."""
    suite = make_suite(data_root, mode="template", reuse_runs=True, wall_seconds=2)
    slow = "model = (__import__('time').sleep(30), LogisticRegression())[1]"
    for _ in range(2):
        env = suite.make_env(SERVICE)
        env.reset(IRIS, seed=0)
        result = env.step(slow)
        env.close()
        assert result.info["timed_out"] and result.metrics["reused_runs"] == 0.0
    assert (suite.make_env.runs.runs, suite.make_env.runs.reused) == (2, 0)
