"""One sandboxed run per distinct program: copies of a reply share its run's outcome.

A GRPO group often holds the same reply several times (a converging policy writes
`model = RidgeClassifier()` in most of its samples), and the program it makes is the same
program on the same public files under the same limits. Running it once and handing every
copy that outcome saves a sandboxed Python start-up with pandas and scikit-learn per copy:
on a small CPU the larger part of a template-mode step.

Only complete runs are kept, and only where the milestone prints come from the rules (an LLM
instrumenter's rewrite is sampled anew for every copy). A run the sandbox failed, a cancelled
one, or one killed at a limit (which may be the machine's load rather than the code) is run
again by the next copy. Code that draws unseeded random numbers gets its first draw for every
copy: one unbiased sample of its outcome, shared. Copies that arrive while the first copy
runs wait for it instead of starting their own run.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from practicum.envs.mle.credit.outcome import RunOutcome


class RunCache:
    """Outcomes of programs already run, by key (competition and program), least recently
    used first out. Thread-safe: the actors of a suite share one."""

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, RunOutcome] = OrderedDict()
        self._running: dict[Hashable, threading.Event] = {}
        self.runs = 0
        """Programs run for real."""
        self.reused = 0
        """Copies handed a kept outcome."""

    def outcome(
        self,
        key: Hashable,
        run: Callable[[], tuple[RunOutcome, bool]],
        cancel: threading.Event | None = None,
    ) -> tuple[RunOutcome, bool] | None:
        """(outcome, reused): the kept outcome of `key`, else the outcome `run()` returns with
        whether it may be kept. None when `cancel` was set while waiting for another copy."""
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.reused += 1
                    return copy.deepcopy(self._done[key]), True
                pending = self._running.get(key)
                if pending is None:
                    pending = self._running[key] = threading.Event()
                    break
            while not pending.wait(0.2):  # another copy runs it: wait, then look again
                if cancel is not None and cancel.is_set():
                    return None
        keep = None
        try:
            outcome, reusable = run()
            keep = outcome if reusable else None
            return outcome, False
        finally:
            with self._lock:
                del self._running[key]
                self.runs += 1
                if keep is not None:
                    self._done[key] = copy.deepcopy(keep)
                    while len(self._done) > self.max_entries:
                        self._done.popitem(last=False)
            pending.set()
