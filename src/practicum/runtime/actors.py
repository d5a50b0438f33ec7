"""A supervised pool of actor threads: a dead actor is reported and replaced.

Each actor runs `body(state)` until the pool stops. An exception escaping the body kills that
thread; the supervisor thread notices within `poll` seconds, calls `on_death(state, error)` (the
runtime turns the actor's in-flight episode into a logged failure) and starts a fresh thread in
the same slot. The learner is never involved.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)


@dataclass
class ActorState:
    """What one actor slot is doing; read by the supervisor and the runtime."""

    actor_id: int
    current: Any = None
    """The assignment (episode slot) in progress, None between episodes."""
    env: Any = None
    """The environment of the episode in progress (so shutdown can kill it)."""
    busy_seconds: float = 0.0
    """Wall time spent inside episodes (utilisation numerator)."""
    episodes: int = 0
    restarts: int = 0
    error: BaseException | None = None
    error_trace: str = ""
    thread: threading.Thread | None = field(default=None, repr=False)


class ActorPool:
    def __init__(
        self,
        n: int,
        body: Callable[[ActorState], None],
        on_death: Callable[[ActorState, BaseException], None],
        poll: float = 0.05,
    ):
        self.states = [ActorState(i) for i in range(n)]
        self.body, self.on_death, self.poll = body, on_death, poll
        self.stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.started_at = 0.0

    @property
    def restarts(self) -> int:
        return sum(s.restarts for s in self.states)

    def start(self) -> "ActorPool":
        self.started_at = time.perf_counter()
        for s in self.states:
            self._spawn(s)
        self._supervisor = threading.Thread(
            target=self._supervise, name="actor-supervisor", daemon=True
        )
        self._supervisor.start()
        return self

    def _spawn(self, state: ActorState) -> None:
        state.error, state.error_trace = None, ""
        state.thread = threading.Thread(
            target=self._run, args=(state,), daemon=True, name=f"actor-{state.actor_id}"
        )
        state.thread.start()

    def _run(self, state: ActorState) -> None:
        try:
            self.body(state)
        except BaseException as e:  # recorded for the supervisor; the thread then dies
            state.error, state.error_trace = e, traceback.format_exc(limit=5)

    def _supervise(self) -> None:
        while not self.stopping.wait(self.poll):
            for s in self.states:
                if s.thread is not None and not s.thread.is_alive() and not self.stopping.is_set():
                    err = s.error or RuntimeError("actor thread exited")
                    log.error(
                        "actor %d died: %s: %s\n%s",
                        s.actor_id,
                        type(err).__name__,
                        err,
                        s.error_trace,
                    )
                    try:
                        self.on_death(s, err)
                    except Exception:
                        log.exception("handling the death of actor %d failed", s.actor_id)
                    s.current, s.env = None, None
                    s.restarts += 1
                    self._spawn(s)

    def utilisation(self) -> float:
        """Fraction of actor-seconds spent inside episodes since start."""
        elapsed = time.perf_counter() - self.started_at
        return sum(s.busy_seconds for s in self.states) / max(1e-9, elapsed * len(self.states))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop supervising, kill environments in flight, and wait for the actor threads."""
        self.stopping.set()
        for s in self.states:
            kill = getattr(s.env, "kill", None)
            if kill is not None:
                kill()
        deadline = time.perf_counter() + timeout
        for s in self.states:
            if s.thread is not None:
                s.thread.join(timeout=max(0.0, deadline - time.perf_counter()))
        if self._supervisor is not None:
            self._supervisor.join(timeout=1.0)
        alive = [s.actor_id for s in self.states if s.thread is not None and s.thread.is_alive()]
        if alive:
            log.warning(
                "actors %s did not stop within %.0f s (abandoned daemon threads)", alive, timeout
            )
