"""Environments in Ray actors (`placement.envs` of a Ray plan, the default there).

    driver (where `practicum train` runs)                 Ray actors (this machine or a cluster)
      sampler + GenerationServer, learner, store, ledger    EnvWorker: builds the suite from
      sync / async batch source, episode builders           task.name + task.options, then
        RayEnv (an Env proxy) --reset/step/close--------->  one environment per episode
                              <--model-service calls-----  (the env's own LLM calls)

Environment execution moves: reset and step, the slow, stateful and crash-prone part. The
learner stays in the driver, and the sampler too unless `placement.engine` moves it into
actors of its own (`practicum.runtime.ray_engine`), so episodes come back to the same
episode store and ledger and resume works unchanged; `runtime.mode` sync and async both work,
since the runtime only sees the `Env` contract. Nothing unpicklable crosses the wire: a worker
builds its own suite from the task config by name, and calls carry tasks, seeds, action text
and step results.

Workers: `RayEnvPool` hands each episode an idle worker, starting a new one when none is idle,
so there is one worker per environment in flight (sync: group_size * tasks_per_step; async:
runtime.num_actors; evaluation: its tasks) and workers are reused across episodes. The
session starts the runtime's number of them in parallel before training.

Faults: a worker that dies (killed, OOM, segfault) ends only the episode it was running, as a
`StepResult(done=True, failure=reason)` with `failure_reward`, exactly like an environment child
process dying in the driver (`practicum.envs.process_env`). The episode is stored
with its reason, so none is lost; the dead worker is discarded and the next episode gets a fresh
one (one found dead at the start of an episode is replaced and the reset retried). The episode
is not re-run: its turns were sampled from the policy and may already be stale. Training still
goes through the store and the ledger, so no episode is trained twice.

Timeouts: a call (reset, step, close) that runs longer than `call_timeout` seconds
(`placement.call_timeout_s`) is handled like a dead worker: the worker is killed, the episode
ends as a logged failure (`WorkerTimedOut`; a reset is not retried, it would likely hang again)
and the next episode gets a fresh worker. Starting a worker may take `START_SECONDS`.

Model service: the env's own LLM calls (policy, base, other specs) reach the driver's
`ModelService` through the worker: the driver polls the step in progress and serves requests
while it waits (the `ChildModelService` protocol of the local child processes).

Suites that keep state across episodes (`Suite.state`, e.g. MLE's solution buffer) are refused:
that state would live in the workers, not in the checkpoint (`placement.envs: null` runs them
in the driver).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any

from practicum.engine.service import ModelService
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.process_env import ChildModelService, EnvFailure, failed_step
from practicum.envs.registry import Suite, SuiteContext
from practicum.errors import ConfigError
from practicum.runtime.ray_cluster import START_SECONDS, require_ray, start_ray

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""How long one poll of a worker waits for its call to finish or to ask the model service."""


class WorkerDied(EnvFailure):
    """The Ray actor running the environment died (killed, OOM, crashed)."""


class WorkerTimedOut(EnvFailure):
    """A call to the Ray actor running the environment ran past the call timeout (the actor
    was killed)."""


class _Mailbox:
    """The pipe `ChildModelService` expects, inside a worker: requests go out with the call's
    replies (polled by the driver), answers come back through `EnvWorker.answer`."""

    def __init__(self, outbox: queue.Queue, inbox: queue.Queue):
        self.outbox, self.inbox = outbox, inbox

    def send(self, message) -> None:
        self.outbox.put(message)

    def recv(self):
        return self.inbox.get()


class EnvWorker:
    """A Ray actor running one environment at a time (made remote by `RayEnvPool`).

    Calls are started with `begin(op, arg)` and run in a thread of the actor; `poll` returns
    ("ok", result), ("error", reason), ("model", request) or ("wait", None)."""

    def __init__(self, task_name: str, task_options: dict | None, ctx: SuiteContext):
        from practicum.envs.registry import build_suite

        self.suite = build_suite(task_name, task_options, ctx)
        self.outbox: queue.Queue = queue.Queue()
        self.inbox: queue.Queue = queue.Queue()
        self.models = ChildModelService(_Mailbox(self.outbox, self.inbox))
        self.env: Env | None = None

    def pid(self) -> int:
        return os.getpid()

    def begin(self, op: str, arg: Any) -> None:
        threading.Thread(target=self._run, args=(op, arg), daemon=True).start()

    def _run(self, op: str, arg: Any) -> None:
        try:
            if op == "reset":
                self._close_env()
                self.env = self.suite.make_env(self.models)
                out: Any = self.env.reset(*arg)
            elif op == "step":
                if self.env is None:
                    raise RuntimeError("step before reset")
                out = self.env.step(arg)
            elif op == "close":
                out = self._close_env()
            else:
                raise ValueError(f"unknown request {op!r}")
            self.outbox.put(("ok", out))
        except Exception as e:
            self.outbox.put(("error", f"{type(e).__name__}: {e}"))

    def _close_env(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()

    def poll(self, timeout: float) -> tuple[str, Any]:
        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            return ("wait", None)

    def answer(self, reply: tuple[str, Any]) -> None:
        self.inbox.put(reply)

    def kill_env(self) -> None:
        """Stop the environment's work in progress (runtime shutdown)."""
        if self.env is not None:
            self.env.kill()


class _Worker:
    """The driver's handle on one EnvWorker actor."""

    def __init__(self, handle, pid: int):
        self.handle, self.pid = handle, pid
        self.op: str | None = None
        """The call in progress ("reset", "step", "close"), None when idle."""
        self.since = 0.0
        """When that call started (time.perf_counter())."""


class RayEnv(Env):
    """An `Env` whose environment lives in a Ray actor from `pool` (module docstring)."""

    def __init__(self, pool: RayEnvPool, models: ModelService | None, failure_reward: float = 0.0):
        self.pool, self.models, self.failure_reward = pool, models, failure_reward
        self.worker: _Worker | None = None
        self._killed = False

    def reset(self, task: Task, seed: int = 0) -> Start:
        """Take a worker (a fresh one if none is idle) and reset it; a worker found dead (it
        died while idle) is replaced and the reset retried once, since nothing of the episode
        has happened yet. Raises `EnvFailure`."""
        for attempt in (1, 2):
            if self.worker is None:
                self.worker = self.pool.acquire()
            try:
                return self._call("reset", (task, seed))
            except WorkerDied:
                self.worker = None
                if attempt == 2 or self._killed:
                    raise
        raise AssertionError("unreachable")

    def step(self, action: str) -> StepResult:
        start = time.perf_counter()
        try:
            return self._call("step", action)
        except EnvFailure as e:
            return failed_step(e, self.failure_reward, start, quiet=self._killed)

    def close(self) -> None:
        """Close the environment and give the worker back (a dead one is replaced)."""
        w, self.worker = self.worker, None
        if w is None:
            return
        try:
            self._call("close", None, w)
        except EnvFailure:
            pass  # dead: _call told the pool
        self.pool.release(w)

    def kill(self) -> None:
        """Stop the call in progress now, from any thread."""
        w = self.worker
        handle = w.handle if w is not None else None
        if handle is not None:
            self._killed = True
            handle.kill_env.remote()

    def _call(self, op: str, arg: Any, worker: _Worker | None = None) -> Any:
        import ray

        w = worker or self.worker
        if w is None or w.handle is None:
            raise EnvFailure(f"env {op}: no worker (call reset first)")
        w.op, w.since = op, time.perf_counter()
        deadline = w.since + self.pool.call_timeout
        try:
            w.handle.begin.remote(op, arg)
            while True:
                left = deadline - time.perf_counter()
                try:
                    if left <= 0:
                        raise ray.exceptions.GetTimeoutError
                    # the actor answers a poll within min(POLL_SECONDS, left) unless it hangs
                    kind, payload = ray.get(
                        w.handle.poll.remote(min(POLL_SECONDS, left)), timeout=left + POLL_SECONDS
                    )
                except ray.exceptions.GetTimeoutError:
                    self.pool.died(w, f"timed out during {op}")
                    raise WorkerTimedOut(
                        f"env {op} timed out after "
                        f"{self.pool.call_timeout:g} s (pid {w.pid}, killed)"
                    ) from None
                if kind == "wait":
                    continue
                if kind == "model":  # the env asks the model service; serve it, keep waiting
                    w.handle.answer.remote(self._serve_model(*payload))
                    continue
                if kind == "error":
                    raise EnvFailure(f"env {op} raised {payload}")
                return payload
        except ray.exceptions.RayActorError as e:
            self.pool.died(w)
            who = "killed on request" if self._killed else f"env worker died during {op}"
            raise WorkerDied(f"{who} (pid {w.pid}: {type(e).__name__})") from None
        finally:
            w.op = None

    def _serve_model(self, spec: str, messages, params) -> tuple[str, Any]:
        self.pool.count_model_call()
        try:
            if self.models is None:
                raise RuntimeError("this environment was given no model service")
            if spec in ("policy", "base"):
                return "model_ok", self.models.complete(messages, params, adapter=spec == "policy")
            client = self.models.client(spec)
            if client is None:
                raise RuntimeError(f"model spec {spec!r} has no model")
            return "model_ok", client.complete(messages, params)
        except Exception as e:  # the env sees the failure; the worker lives on
            return "model_error", f"{type(e).__name__}: {e}"


class RayEnvPool:
    """Ray env workers for one session: an idle one per new episode, a new one when none is
    idle, a dead one replaced. Calling the pool is the suite's `EnvFactory`."""

    def __init__(
        self,
        task_name: str,
        task_options: dict | None,
        ctx: SuiteContext,
        address: str | None = None,
        env_cpus: float = 0.0,
        num_cpus: int | None = None,
        call_timeout: float = 1800.0,
    ):
        import ray

        self._own_ray = start_ray(address, num_cpus)
        self.address, self.call_timeout = address, call_timeout
        self._remote = ray.remote(EnvWorker).options(num_cpus=env_cpus, max_concurrency=4)
        self._args = (task_name, task_options, ctx)
        self.failure_reward = ctx.failure_reward
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self.workers: list[_Worker] = []
        """Every live worker (idle or in use)."""
        self.started = self.died_count = self.model_calls = 0

    def __call__(self, models: ModelService | None = None) -> RayEnv:
        return RayEnv(self, models, self.failure_reward)

    def acquire(self) -> _Worker:
        import ray

        with self._lock:
            if self._idle:
                return self._idle.pop()
        handle = self._remote.remote(*self._args)
        try:
            pid = ray.get(handle.pid.remote(), timeout=max(self.call_timeout, START_SECONDS))
        except ray.exceptions.RayError as e:  # e.g. the suite failed to build, or a timeout
            ray.kill(handle)
            raise EnvFailure(f"starting an env worker failed: {e}") from None
        w = _Worker(handle, pid)
        with self._lock:
            self.workers.append(w)
            self.started += 1
        return w

    def start_workers(self, n: int) -> None:
        """Start `n` idle workers at once (in parallel: episodes then find them ready). Raises
        `EnvFailure` when they cannot start (e.g. the suite fails to build on a node)."""
        import ray

        handles = [self._remote.remote(*self._args) for _ in range(n)]
        try:
            pids = ray.get(
                [h.pid.remote() for h in handles], timeout=max(self.call_timeout, START_SECONDS)
            )
        except ray.exceptions.RayError as e:
            for h in handles:
                ray.kill(h)
            raise EnvFailure(f"starting {n} env workers failed: {e}") from None
        with self._lock:
            for h, pid in zip(handles, pids):
                w = _Worker(h, pid)
                self.workers.append(w)
                self._idle.append(w)
            self.started += n

    def release(self, w: _Worker) -> None:
        with self._lock:
            if w.handle is not None and w in self.workers:
                self._idle.append(w)

    def died(self, w: _Worker, why: str = "died") -> None:
        """Forget a dead (or hung) worker and kill it (the next episode starts a new one)."""
        import ray

        with self._lock:
            if w.handle is None:
                return
            handle, w.handle = w.handle, None
            self.died_count += 1
            if w in self.workers:
                self.workers.remove(w)
        log.error("env worker (pid %d) %s; its episode ends as a failure", w.pid, why)
        ray.kill(handle, no_restart=True)

    def count_model_call(self) -> None:
        with self._lock:
            self.model_calls += 1

    def busy(self) -> list[_Worker]:
        """Workers with a call in progress."""
        with self._lock:
            return [w for w in self.workers if w.op is not None]

    def summary(self) -> dict:
        return {
            "ray": {
                "address": self.address or "local",
                "workers_started": self.started,
                "workers_died": self.died_count,
                "workers_live": len(self.workers),
                "model_calls": self.model_calls,
            }
        }

    def metrics(self) -> dict[str, float]:
        """Per-step figures for metrics.jsonl (cumulative over the session)."""
        with self._lock:
            return {
                "ray_workers_started": float(self.started),
                "ray_workers_died": float(self.died_count),
                "ray_model_calls": float(self.model_calls),
            }

    def close(self) -> None:
        """Kill every worker; stop Ray if this pool started it."""
        import ray

        with self._lock:
            workers, self.workers, self._idle = self.workers, [], []
        for w in workers:
            if w.handle is not None:
                ray.kill(w.handle, no_restart=True)
                w.handle = None
        if self._own_ray:
            self._own_ray = False
            ray.shutdown()


def refuse_stateful(suite: Suite, task_name: str) -> None:
    """A suite that keeps state across episodes cannot run in Ray actors (module doc)."""
    if suite.state is not None:
        raise ConfigError(
            f"config error at placement.envs: environment {task_name!r} keeps "
            "state across episodes (Suite.state), which would live in the Ray "
            "workers instead of the checkpoint; set placement.envs: null (they "
            "then run in this process)"
        )


def use_ray(
    suite: Suite,
    task_name: str,
    task_options: dict | None,
    ctx: SuiteContext,
    address: str | None = None,
    env_cpus: float = 0.0,
    warm: int = 0,
    call_timeout: float = 1800.0,
) -> RayEnvPool:
    """Point `suite.make_env` at a new pool of Ray env workers with `warm` workers started
    (and return the pool)."""
    require_ray("placement.envs")
    refuse_stateful(suite, task_name)
    pool = RayEnvPool(task_name, task_options, ctx, address, env_cpus, call_timeout=call_timeout)
    try:
        pool.start_workers(warm)
    except BaseException:
        pool.close()
        raise
    suite.make_env = pool
    return pool
