"""One thread owns the policy's sampling: it batches the generate requests of many actors.

Actors call `GenerationServer.generate(ids)` from their own threads; the server collects the
requests that arrive within `batch_window` seconds of each other into one batched
`Policy.generate`, which is much cheaper than one call per actor. Every sample comes back with
the policy version that produced it.

`WeightsGate` makes "one turn, one version" hold: generation and weight updates exclude each
other, and a pending update goes first, so the learner is never starved by a busy sampler.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator

from practicum.engine.base import Sample, SamplingParams

log = logging.getLogger(__name__)


class WeightsGate:
    """Generation and weight updates (and evaluation) exclude each other; updates have priority."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sampling = False
        self._updating = False
        self._waiting_updates = 0

    @contextmanager
    def sampling(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._updating and not self._waiting_updates)
            self._sampling = True
        try:
            yield
        finally:
            with self._cond:
                self._sampling = False
                self._cond.notify_all()

    @contextmanager
    def updating(self) -> Iterator[None]:
        with self._cond:
            self._waiting_updates += 1
            self._cond.wait_for(lambda: not self._sampling and not self._updating)
            self._waiting_updates -= 1
            self._updating = True
        try:
            yield
        finally:
            with self._cond:
                self._updating = False
                self._cond.notify_all()


@dataclass
class _Request:
    ids: list[int]
    params: SamplingParams
    future: Future


class GenerationServer:
    """Batches concurrent generate requests into single `policy.generate` calls (see module doc).

    Requests with different sampling params are never mixed in one call. `seed`, when given,
    makes round r use seed `seed * 1_000_003 + r * 4096` (rows are seeded seed + i by the engine).
    """

    def __init__(self, policy, gate: WeightsGate, params: SamplingParams,
                 batch_window: float = 0.005, max_batch: int = 64, seed: int | None = None):
        self.policy, self.gate, self.params = policy, gate, params
        self.batch_window, self.max_batch, self.seed = batch_window, max_batch, seed
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.rounds = 0
        self.prompts = 0
        self.busy_seconds = 0.0

    def start(self) -> "GenerationServer":
        self._thread = threading.Thread(target=self._loop, name="generation-server", daemon=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=60)
        while True:  # fail whatever is still queued, so no actor waits forever
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                break
            if req is not None:
                req.future.cancel()

    def submit(self, ids: list[int], params: SamplingParams | None = None) -> Future:
        fut: Future = Future()
        if self._stop.is_set():
            fut.cancel()
        else:
            self._queue.put(_Request(list(ids), params or self.params, fut))
        return fut

    def generate(self, ids: list[int], params: SamplingParams | None = None) -> tuple[Sample, int]:
        """Blocking: (sample, policy version that produced it). Raises CancelledError once the
        server has stopped."""
        return self.submit(ids, params).result()

    # -- server thread ------------------------------------------------------------------------
    def _collect(self, first: _Request) -> list[_Request]:
        """The first request plus those arriving within `batch_window` of the previous one
        (at most 8 windows in all, at most `max_batch` requests)."""
        batch = [first]
        deadline = time.perf_counter() + 8 * self.batch_window
        while len(batch) < self.max_batch:
            wait = min(self.batch_window, deadline - time.perf_counter())
            if wait <= 0:
                break
            try:
                req = self._queue.get(timeout=wait)
            except queue.Empty:
                break
            if req is None:
                self._queue.put(None)  # keep the stop signal for the loop
                break
            batch.append(req)
        return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            first = self._queue.get()
            if first is None:
                break
            batch = self._collect(first)
            by_params: dict[str, list[_Request]] = {}
            for r in batch:
                by_params.setdefault(repr(r.params), []).append(r)
            for reqs in by_params.values():
                self._run(reqs)

    def _run(self, reqs: list[_Request]) -> None:
        params = reqs[0].params
        if self.seed is not None:
            params = replace(params, seed=self.seed * 1_000_003 + self.rounds * 4096)
        try:
            with self.gate.sampling():
                start = time.perf_counter()
                version = self.policy.version
                samples = self.policy.generate([r.ids for r in reqs], params)
                self.busy_seconds += time.perf_counter() - start
        except Exception as e:  # each actor's episode ends with this failure; the server lives
            if len(reqs) > 1:  # one bad prompt (e.g. too long) must not fail its batch-mates
                for r in reqs:
                    self._run([r])
                return
            log.warning("generate failed: %s", e)
            reqs[0].future.set_exception(e)
            return
        self.rounds += 1
        self.prompts += len(reqs)
        for r, s in zip(reqs, samples):
            r.future.set_result((s, version))
