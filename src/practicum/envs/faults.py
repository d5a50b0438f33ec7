"""Fault injection: wrap any environment so that resets and steps fail on purpose.

Used by the fault-isolation tests and chaos runs (`task.options.faults` of the timed bandit).
Each fault fires with its own probability, drawn from a seeded RNG per environment:

  reset_error: reset() raises            step_error: step() raises
  step_hang:   step() sleeps `hang_seconds` (past any sane step timeout)
  step_kill:   the process SIGKILLs itself mid-step (only allowed inside a child process)
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from typing import Callable

from practicum.envs.base import Env, Start, StepResult, Task

STEP_FAULTS = ("step_error", "step_hang", "step_kill")
FAULTS = ("reset_error", *STEP_FAULTS)


class InjectedFault(RuntimeError):
    """Raised on purpose by `FaultyEnv`."""


def check_faults(faults: dict[str, float]) -> None:
    """Raise ValueError unless `faults` names known faults with sane rates."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown fault(s) {sorted(unknown)} (known: {', '.join(FAULTS)})")
    if sum(faults.get(k, 0.0) for k in STEP_FAULTS) > 1 or any(v < 0 for v in faults.values()):
        raise ValueError(f"rates must be >= 0 and the step faults must sum to <= 1, got {faults}")


class FaultyEnv(Env):
    def __init__(
        self,
        make_inner: Callable[[], Env],
        faults: dict[str, float],
        seed: int = 0,
        hang_seconds: float = 3600.0,
    ):
        check_faults(faults)
        if faults.get("step_kill") and multiprocessing.parent_process() is None:
            raise RuntimeError(
                "fault step_kill would kill the trainer: it needs the env to run "
                "in a child process (ProcessEnv)"
            )
        self.inner = make_inner()
        self.faults, self.hang_seconds = faults, hang_seconds
        self.rng = random.Random(seed ^ 0x5EED)

    def reset(self, task: Task, seed: int = 0) -> Start:
        if self.rng.random() < self.faults.get("reset_error", 0.0):
            raise InjectedFault("injected fault: reset failed")
        return self.inner.reset(task, seed)

    def step(self, action: str) -> StepResult:
        u, edge = self.rng.random(), 0.0
        for kind in STEP_FAULTS:
            edge += self.faults.get(kind, 0.0)
            if u < edge:
                return self._fail(kind)
        return self.inner.step(action)

    def _fail(self, kind: str) -> StepResult:
        if kind == "step_error":
            raise InjectedFault("injected fault: step crashed")
        if kind == "step_hang":
            time.sleep(self.hang_seconds)
            raise InjectedFault("injected fault: step hung and woke up")
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process was killed")

    def close(self) -> None:
        self.inner.close()
