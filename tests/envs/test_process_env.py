"""ProcessEnv: the env runs in a child; crashes, hangs and kills end one episode with a reason,
and the next episode gets a fresh child."""

import os
import signal
import threading
import time
from functools import partial

import pytest

from practicum.envs.base import Task
from practicum.envs.faults import FaultyEnv
from practicum.envs.process_env import EnvFailure, ProcessEnv
from practicum.envs.timed_bandit import BanditOptions, bandit_env, faulty_bandit_env

TASK = Task("t")


def bandit(time_scale: float = 0.01):
    """A picklable env factory (forkserver children import it by name): factory(models)."""
    return partial(bandit_env, BanditOptions(time_scale=time_scale, process=False))


def faulty(**faults):
    opts = BanditOptions(time_scale=0.01, process=False, faults=faults)
    return partial(faulty_bandit_env, opts, 0)


@pytest.fixture
def envs():
    made = []

    def make(factory, **kw):
        made.append(ProcessEnv(factory, **kw))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_env_runs_in_a_child_process(envs):
    env = envs(bandit())
    assert "<choice>" in env.reset(TASK).messages[-1]["content"]
    assert env.pid not in (None, os.getpid())
    r = env.step("<choice>slow</choice>")
    assert r.done and r.reward == 1.0 and r.duration > 0
    pid = env.pid
    env.close()
    assert env.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_step_raising_is_a_failure_and_the_next_episode_gets_a_fresh_child(envs):
    env = envs(faulty(step_error=1.0), failure_reward=-2.0)
    env.reset(TASK)
    first_pid = env.pid
    r = env.step("fast")
    assert r.done and r.reward == -2.0
    assert "raised InjectedFault: injected fault: step crashed" in r.failure
    env.reset(TASK)
    assert env.pid != first_pid


def test_hang_past_the_step_timeout_kills_the_child(envs):
    env = envs(faulty(step_hang=1.0), step_timeout=0.3)
    env.reset(TASK)
    t0 = time.perf_counter()
    r = env.step("fast")
    assert time.perf_counter() - t0 < 5
    assert r.done and r.failure == "env step timed out after 0.3 s (child killed)"


def test_child_killed_from_outside_mid_step(envs):
    env = envs(bandit(time_scale=100.0), step_timeout=30)
    env.reset(TASK)
    threading.Timer(0.3, os.kill, (env.pid, signal.SIGKILL)).start()
    r = env.step("slow")
    assert r.done and r.failure == "env process died during step (killed by SIGKILL)"


def test_child_killing_itself_mid_step(envs):
    env = envs(faulty(step_kill=1.0))
    env.reset(TASK)
    assert "killed by SIGKILL" in env.step("fast").failure


def test_kill_on_request_from_another_thread(envs):
    env = envs(bandit(time_scale=100.0), step_timeout=30)
    env.reset(TASK)
    threading.Timer(0.3, env.kill).start()
    assert env.step("slow").failure.startswith("killed on request")


def test_reset_failures_raise_env_failure(envs):
    with pytest.raises(EnvFailure, match="reset raised InjectedFault"):
        envs(faulty(reset_error=1.0)).reset(TASK)
    unchecked = BanditOptions.model_construct(
        **{**BanditOptions().model_dump(), "faults": {"nonsense": 1.0}}
    )
    with pytest.raises(EnvFailure, match="building the env failed: ValueError: unknown fault"):
        envs(partial(faulty_bandit_env, unchecked, 0)).reset(TASK)


def test_step_kill_fault_refuses_to_run_in_the_trainer():
    with pytest.raises(RuntimeError, match="would kill the trainer"):
        FaultyEnv(bandit(), {"step_kill": 0.5})


def test_the_start_messages_and_stop_strings_come_back_from_the_child(envs):
    from practicum.envs.calculator import CalculatorEnv, _make_env
    from practicum.envs.sandbox import Limits
    from practicum.tasks.arithmetic import make_tasks

    env = envs(partial(_make_env, Limits(wall_seconds=5), True, True))
    start = env.reset(make_tasks({"basic_arithmetic": 1.0}, 1, seed=0, split="train")[0])
    assert start.stop_strings == CalculatorEnv.stop_strings
    assert start.messages[0]["role"] == "system" and len(start.messages) == 6
