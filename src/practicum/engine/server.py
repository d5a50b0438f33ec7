"""One thread owns sampling: it batches the generate requests of actors, the synchronous
rollout, evaluation and the model service into single `Sampler.generate` calls.

    server = GenerationServer(sampler).start()
    sample, version = server.generate(ids, params, seed=s)              # one request, blocking
    pairs = server.generate_batch([(ids, params, seed), ...])           # submitted together
    with server.training():                       # sampling goes on, unless it runs the
        ...train...                                # module being trained (or sleeps meanwhile)
    with server.updating():                       # no sampling meanwhile
        server.publish(update)

Requests that arrive within `batch_window` seconds of each other go into one call; requests
with different sampling params or adapter flag are never mixed (the frozen base, adapter off,
runs in its own sub-batch). Every sample comes back with the policy version that produced it.

`WeightsGate` makes "one turn, one version" hold: generation and weight updates exclude each
other, and a pending update goes first, so the learner is never starved by a busy sampler.
Training excludes only the calls that would run a module the learner trains
(`Sampler.shares_trainable`): those are deferred until the step ends while the others are
served, so a sampler with weights of its own keeps sampling through the update (as in
asynchronous RL systems such as AReaL, arXiv 2505.24298); the staleness bound of the async
runtime then decides which of those samples are trained.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from practicum.engine.base import (
    Interrupted,
    Sample,
    Sampler,
    SamplerFailure,
    SamplingParams,
    SleepingSampler,
    WeightUpdate,
)

log = logging.getLogger(__name__)


class WeightsGate:
    """Generation, training and weight updates (module doc). Updates exclude all generation;
    training excludes the generation that shares the trainable; a waiting update or training
    step goes before more of the generation it excludes. Training and updates come from the
    one learner thread, one after the other."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sampling = 0
        self._sampling_shared = 0
        """Generate calls running, and those of them that run the trainable's module."""
        self._updating = False
        self._waiting_updates = 0
        self._training = False
        self._waiting_training = 0

    def _trains(self, shares_trainable: bool) -> bool:
        return shares_trainable and (self._training or self._waiting_training > 0)

    @contextmanager
    def sampling(self, shares_trainable: bool = True) -> Iterator[bool]:
        """Hold for one generate call: yields True once no update runs or waits. A call that
        shares the trainable while the learner trains (or waits to) yields False at once and
        holds nothing: its caller defers it."""
        with self._cond:
            self._cond.wait_for(
                lambda: (
                    self._trains(shares_trainable) or not (self._updating or self._waiting_updates)
                )
            )
            if self._trains(shares_trainable):
                allowed = False
            else:
                allowed = True
                self._sampling += 1
                self._sampling_shared += shares_trainable
        if not allowed:
            yield False
            return
        try:
            yield True
        finally:
            with self._cond:
                self._sampling -= 1
                self._sampling_shared -= shares_trainable
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

    @contextmanager
    def training(self) -> Iterator[None]:
        with self._cond:
            self._waiting_training += 1
            self._cond.wait_for(lambda: not self._sampling_shared)
            self._waiting_training -= 1
            self._training = True
        try:
            yield
        finally:
            with self._cond:
                self._training = False
                self._cond.notify_all()


@dataclass
class _Request:
    ids: list[int]
    params: SamplingParams
    seed: int | None
    adapter: bool
    future: Future


class GenerationServer:
    """Batches concurrent generate requests into single `sampler.generate` calls (module doc)."""

    def __init__(self, sampler: Sampler, batch_window: float = 0.005, max_batch: int = 64):
        self.sampler, self.gate = sampler, WeightsGate()
        self.batch_window, self.max_batch = batch_window, max_batch
        self._queue: queue.Queue[list[_Request] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._deferred: list[_Request] = []
        """Requests put off while the learner trains their module (server thread only)."""
        self.rounds = 0
        self.prompts = 0
        self.busy_seconds = 0.0

    @property
    def version(self) -> int:
        return self.sampler.version

    def start(self) -> GenerationServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="generation-server", daemon=True
            )
            self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        interrupt = getattr(self.sampler, "interrupt", None)  # a sampler that stops mid-call
        if interrupt is not None and self.alive:
            interrupt.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if interrupt is not None:
            interrupt.clear()  # the sampler may serve another server after this one
        while True:  # fail whatever is still queued, so no caller waits forever
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            for req in item or []:
                req.future.cancel()
        for req in self._deferred:  # a retried row is running already: fail it instead
            if not req.future.cancel():
                req.future.set_exception(CancelledError("the generation server stopped"))
        self._deferred = []

    # -- callers ---------------------------------------------------------------------------------
    def submit(
        self, ids: list[int], params: SamplingParams, seed: int | None = None, adapter: bool = True
    ) -> Future:
        return self._put([(ids, params, seed)], adapter)[0]

    def generate(
        self, ids: list[int], params: SamplingParams, seed: int | None = None, adapter: bool = True
    ) -> tuple[Sample, int]:
        """Blocking: (sample, policy version that produced it). Raises CancelledError once the
        server has stopped."""
        return self.submit(ids, params, seed, adapter).result()

    def generate_batch(
        self, rows: list[tuple[list[int], SamplingParams, int | None]], adapter: bool = True
    ) -> list[tuple[Sample | BaseException, int]]:
        """Blocking: per (ids, params, seed) row, (sample, version) or (the exception that
        failed that row, -1); all rows are submitted at once, so they batch together."""
        out = []
        for f in self._put(rows, adapter):
            try:
                out.append(f.result())
            except Exception as e:  # one bad row (e.g. a prompt too long) fails only itself
                out.append((e, -1))
        return out

    @contextmanager
    def updating(self) -> Iterator[None]:
        """No generate call runs inside the block (train, then `publish`)."""
        with self.gate.updating():
            yield

    @contextmanager
    def training(self) -> Iterator[None]:
        """The learner trains inside the block: requests whose sampler would run the module
        being trained (`Sampler.shares_trainable`) wait until it ends; the others are served."""
        try:
            with self.gate.training(), self._sampler_asleep():
                yield
        finally:
            self._queue.put([])  # wake the server thread for the requests it deferred

    @contextmanager
    def _sampler_asleep(self) -> Iterator[None]:
        """A sleeping sampler (vLLM beside the learner) sleeps through the train step; it is
        awake again when the step ends, or, having dropped its weights, once the step's
        weights are published (`SleepingSampler`)."""
        if not isinstance(self.sampler, SleepingSampler):
            yield
            return
        self.sampler.sleep()
        try:
            yield
        finally:
            if not self.sampler.awaits_weights:
                self.sampler.wake_up()

    @property
    def awaits_weights(self) -> bool:
        """The sampler dropped its weights for the train step: until `publish` it samples
        nothing, so a publish must follow the step even when it trained nothing."""
        return isinstance(self.sampler, SleepingSampler) and self.sampler.awaits_weights

    def publish(self, update: WeightUpdate) -> None:
        """Hand new weights to the sampler (call inside `updating()`)."""
        self.sampler.load_weights(update)
        self._queue.put([])  # wake the server thread for requests put off until the weights

    def _put(self, rows, adapter: bool) -> list[Future]:
        reqs = [_Request(list(ids), params, seed, adapter, Future()) for ids, params, seed in rows]
        if self._stop.is_set():
            for r in reqs:
                r.future.cancel()
        else:
            self._queue.put(reqs)
        return [r.future for r in reqs]

    # -- server thread -----------------------------------------------------------------------------
    def _collect(self, first: list[_Request]) -> list[_Request]:
        """The first item's requests plus those arriving within `batch_window` of the previous
        one (at most 8 windows in all)."""
        batch = list(first)
        deadline = time.perf_counter() + 8 * self.batch_window
        while len(batch) < self.max_batch:
            wait = min(self.batch_window, deadline - time.perf_counter())
            if wait <= 0:
                break
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # keep the stop signal for the loop
                break
            batch += item
        return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            first = self._queue.get()
            if first is None:
                break
            pending, self._deferred = self._deferred + self._collect(first), []
            groups: dict[tuple[SamplingParams, bool], list[_Request]] = {}
            for r in pending:
                groups.setdefault((r.params, r.adapter), []).append(r)
            for reqs in groups.values():
                for i in range(0, len(reqs), self.max_batch):
                    self._run(reqs[i : i + self.max_batch])

    def _run(self, reqs: list[_Request]) -> None:
        """Sample `reqs` in one call, or defer them while the learner trains the module they
        would run, or until the weights a sleeping sampler dropped are published. Drops the
        requests their callers cancelled meanwhile (e.g. an async actor at shutdown); the
        others can no longer be cancelled."""
        params, adapter = reqs[0].params, reqs[0].adapter
        try:
            with self.gate.sampling(self.sampler.shares_trainable(adapter)) as allowed:
                if not allowed or self.awaits_weights:
                    self._deferred += reqs
                    return
                reqs = [
                    r for r in reqs if r.future.running() or r.future.set_running_or_notify_cancel()
                ]
                if not reqs:
                    return
                seeds = [r.seed for r in reqs]
                start = time.perf_counter()
                version = self.sampler.version
                samples = self.sampler.generate(
                    [r.ids for r in reqs],
                    params,
                    seeds=None if all(s is None for s in seeds) else seeds,
                    adapter=adapter,
                )
                self.busy_seconds += time.perf_counter() - start
        except Exception as e:  # each caller's episode ends with this failure; the server lives
            if len(reqs) > 1 and not isinstance(e, SamplerFailure):
                for r in reqs:  # one bad prompt (e.g. too long) must not fail its batch-mates
                    self._run([r])
                return
            if not isinstance(e, Interrupted):
                log.warning("generate failed: %s", e)
            for r in reqs:
                r.future.set_exception(e)
            return
        self.rounds += 1
        self.prompts += len(reqs)
        for r, s in zip(reqs, samples):
            r.future.set_result((s, version))
