"""Run any environment inside its own child process, with a timeout on every call.

The trainer's process never runs environment code: a crash, a hang past the timeout, or the
child being killed (OOM killer, sandbox limits, `kill -9`) ends only the current episode, as a
`StepResult(done=True, failure=reason)` with `failure_reward`. The broken child is killed;
the next `reset` starts a fresh one. A thread waiting on the child holds no GIL, so slow
environments never block sampling or learning.

The environment in the child reaches the run's model service through a proxy: its calls come
back over the same pipe while the parent waits for the step, and the parent's thread serves
them (`ChildModelService`).

Children are started with `forkserver` (never `fork`: forking a process that runs torch threads
can deadlock), so the factory must be picklable: a top-level class or function, or a
`functools.partial` of one. It is called as `factory(models)` in the child.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import threading
import time
from functools import partial
from typing import Any, Callable

from practicum.engine.service import Completion, ModelService, check_spec
from practicum.envs.base import Env, Start, StepResult, Task

log = logging.getLogger(__name__)


class EnvFailure(RuntimeError):
    """The environment's child process failed; the message is the reason to log."""


def failed_step(
    err: EnvFailure, failure_reward: float, started: float, quiet: bool = False
) -> StepResult:
    """The StepResult of a step whose env worker failed: the episode ends with the run's
    failure reward (not the policy's fault). `quiet` when the caller killed it on purpose."""
    if not quiet:
        log.warning("env step failed: %s", err)
    return StepResult(
        reward=failure_reward, done=True, duration=time.perf_counter() - started, failure=str(err)
    )


class ChildModelService:
    """The model service as seen from a child process: every call is a request to the parent,
    which serves it with the real `ModelService` while it waits for the step to finish."""

    def __init__(self, conn):
        self._conn = conn
        self._lock = threading.Lock()

    def complete(self, messages, params=None, adapter: bool = True) -> Completion:
        return self._ask(("policy" if adapter else "base"), messages, params)

    def client(self, spec: str) -> _RemoteClient | None:
        check_spec(spec)
        return None if spec.strip() == "rules" else _RemoteClient(self, spec.strip())

    def _ask(self, spec: str, messages, params) -> Completion:
        with self._lock:
            self._conn.send(("model", (spec, list(messages), params)))
            status, payload = self._conn.recv()
        if status != "model_ok":
            raise RuntimeError(f"model service call failed in the trainer: {payload}")
        return payload


class _RemoteClient:
    def __init__(self, service: ChildModelService, spec: str):
        self.service, self.spec = service, spec

    def complete(self, messages, params=None) -> Completion:
        return self.service._ask(self.spec, messages, params)


def _serve(conn, factory: Callable[[Any], Env]) -> None:
    """Child main loop: build the env, then answer (op, arg) requests until close or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    env, build_error = None, None
    try:
        env = factory(ChildModelService(conn))
    except Exception as e:  # reported on the first request
        build_error = f"{type(e).__name__}: {e}"
    while True:
        try:
            op, arg = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if build_error:
                raise RuntimeError(f"building the env failed: {build_error}")
            if op == "reset":
                out: Any = env.reset(*arg)
            elif op == "step":
                out = env.step(arg)
            elif op == "close":
                env.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send(("ok", out))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _factory_modules(factory: Any) -> set[str]:
    """Modules defining a factory (through nested `functools.partial`s), to preload."""
    if isinstance(factory, partial):
        mods = _factory_modules(factory.func)
        for a in (*factory.args, *factory.keywords.values()):
            if callable(a):
                mods |= _factory_modules(a)
        return mods
    mod = getattr(factory, "__module__", None)
    return {mod} if mod and mod != "__main__" else set()


class ProcessEnv(Env):
    """An `Env` proxy whose real environment lives in a child process (see module docstring)."""

    def __init__(
        self,
        factory: Callable[[Any], Env],
        models: ModelService | None = None,
        step_timeout: float = 600.0,
        reset_timeout: float = 60.0,
        failure_reward: float = 0.0,
        start_method: str = "forkserver",
    ):
        self.factory, self.models = factory, models
        self.step_timeout, self.reset_timeout = step_timeout, reset_timeout
        self.failure_reward = failure_reward
        self._ctx = mp.get_context(start_method)
        self._proc = None
        self._conn = None
        self._killed = False

    @property
    def pid(self) -> int | None:
        """The child's pid (None before the first reset or after close)."""
        return self._proc.pid if self._proc is not None else None

    def reset(self, task: Task, seed: int = 0) -> Start:
        """Start a fresh child if there is none alive, then reset it. Raises `EnvFailure`."""
        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
        self._killed = False
        return self._call("reset", (task, seed), self.reset_timeout)

    def step(self, action: str) -> StepResult:
        start = time.perf_counter()
        try:
            return self._call("step", action, self.step_timeout)
        except EnvFailure as e:
            return failed_step(e, self.failure_reward, start, quiet=self._killed)

    def close(self) -> None:
        """Close the env and stop the child (killed if it does not exit within 2 s)."""
        if self._proc is None:
            return
        try:
            if self._proc.is_alive():
                self._conn.send(("close", None))
                if self._conn.poll(2.0):
                    self._conn.recv()
                self._proc.join(timeout=2.0)
        except (OSError, EOFError, BrokenPipeError):
            pass
        finally:
            self._kill()

    def kill(self) -> None:
        """Kill the child now, from any thread: the call in progress ends as a failure."""
        proc = self._proc
        if proc is not None:
            self._killed = True
            try:
                proc.kill()
            except (ValueError, AttributeError, OSError):  # already closed or reaped
                pass

    # -- plumbing -----------------------------------------------------------------------------
    def _start(self) -> None:
        if self._ctx.get_start_method() == "forkserver":
            # Takes effect once, when the fork server starts: children then fork with the env's
            # modules already imported (~50 ms saved per episode).
            self._ctx.set_forkserver_preload(
                ["__main__", __name__, *sorted(_factory_modules(self.factory))]
            )
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(
            target=_serve, args=(child, self.factory), daemon=True, name="practicum-env"
        )
        self._proc.start()
        child.close()
        self._conn = parent

    def _call(self, op: str, arg: Any, timeout: float) -> Any:
        if self._proc is None:
            raise EnvFailure(f"env {op}: no child process (call reset first)")
        deadline = time.perf_counter() + timeout
        try:
            self._conn.send((op, arg))
        except (OSError, BrokenPipeError):
            pass  # the child is gone; recv below reports how it died
        while True:
            try:
                ready = self._conn.poll(max(0.0, deadline - time.perf_counter()))
            except (OSError, BrokenPipeError):
                ready = True
            if not ready:
                self._kill()
                raise EnvFailure(f"env {op} timed out after {timeout:g} s (child killed)")
            try:
                status, payload = self._conn.recv()
            except (EOFError, OSError):
                reason = self._death()
                self._kill()
                who = "killed on request" if self._killed else f"env process died during {op}"
                raise EnvFailure(f"{who} ({reason})") from None
            if status == "model":  # the env asks the model service; serve it, keep waiting
                self._serve_model(*payload)
                continue
            if status == "error":
                self._kill()  # its state is suspect: the next episode gets a fresh child
                raise EnvFailure(f"env {op} raised {payload}")
            return payload

    def _serve_model(self, spec: str, messages, params) -> None:
        try:
            if self.models is None:
                raise RuntimeError("this environment was given no model service")
            if spec in ("policy", "base"):
                out = self.models.complete(messages, params, adapter=spec == "policy")
            else:
                client = self.models.client(spec)
                if client is None:
                    raise RuntimeError(f"model spec {spec!r} has no model")
                out = client.complete(messages, params)
            self._conn.send(("model_ok", out))
        except Exception as e:  # the env sees the failure; the child lives on
            self._conn.send(("model_error", f"{type(e).__name__}: {e}"))

    def _death(self) -> str:
        self._proc.join(timeout=2.0)
        code = self._proc.exitcode
        if code is None:
            return "no reply, child still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=5.0)
            if self._proc.exitcode is not None:
                self._proc.close()
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    def __del__(self) -> None:  # a forgotten env must not leave a child behind
        try:
            self._kill()
        except Exception:
            pass
