"""Serving with continuous batching: one thread steps the running batches, and requests join and
leave them between decode steps, so a short request is never held up by a long one.

    server = ContinuousServer(sampler, max_batch=32).start()
    future = server.submit(ids, params, seed, adapter=True, on_token=callback)
    sample, version = future.result()
    future.cancel()        # the row leaves its batch at the next step (a client went away)
    server.stop()          # unfinished requests fail with ServerStopped

The policy (adapter on) and its frozen base (adapter off) decode in two `RunningBatch`es,
stepped in turn. `on_token(token_id, logprob)` runs on the server thread as each token is
sampled (streaming). This is the serving path (`practicum serve`), where weights never change;
training's rollouts go through `GenerationServer`, whose whole-turn calls keep one policy
version per turn under its weights gate.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Callable

from practicum.engine.base import Sample, SamplingParams
from practicum.engine.running_batch import Row, RunningBatch

log = logging.getLogger(__name__)

IDLE_WAIT = 0.5
"""Seconds the idle server thread sleeps between checks of its stop flag."""


class ServerStopped(RuntimeError):
    """The server stopped before the request finished."""


@dataclass(eq=False)
class _Job:
    ids: list[int]
    params: SamplingParams
    seed: int | None
    adapter: bool
    on_token: Callable[[int, float], None] | None
    future: Future
    row: Row | None = None


class ContinuousServer:
    """Continuous batching over an `HFSampler` (module doc)."""

    def __init__(self, sampler, max_batch: int = 32, prefill_tokens: int = 4096):
        self.sampler, self.max_batch, self.prefill_tokens = sampler, max_batch, prefill_tokens
        """prefill_tokens: prompt tokens admitted per step beyond the first request, so a burst
        of long prompts is prefilled over several steps while the running rows keep going."""
        self.batches = {True: RunningBatch(sampler, True), False: RunningBatch(sampler, False)}
        self._inbox: queue.Queue[_Job | None] = queue.Queue()
        self._jobs: list[_Job] = []
        """Admitted jobs (server thread only)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.steps = 0
        """Decode steps run (one per non-empty batch per round)."""
        self.prompts = 0
        """Requests admitted into a batch."""
        self.peak_rows = 0
        """Most rows decoded in one step (both batches)."""

    @property
    def version(self) -> int:
        return self.sampler.version

    def start(self) -> ContinuousServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="continuous-server", daemon=True
            )
            self._thread.start()
        return self

    @property
    def running(self) -> int:
        """Requests being decoded now."""
        return len(self._jobs)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, wait: bool = True) -> None:
        """Stop at the next step; unfinished requests fail with `ServerStopped`. wait=False
        (e.g. from a signal handler) returns at once."""
        self._stop.set()
        if not wait:  # only the flag: a signal handler must take no lock
            return
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._fail_inbox()

    # -- callers ---------------------------------------------------------------------------------
    def submit(
        self,
        ids: list[int],
        params: SamplingParams,
        seed: int | None = None,
        adapter: bool = True,
        on_token: Callable[[int, float], None] | None = None,
    ) -> Future:
        """A future of (sample, policy version); cancel it to drop the row at the next step."""
        job = _Job(list(ids), params, seed, adapter, on_token, Future())
        if self._stop.is_set():
            job.future.set_exception(ServerStopped("the server is shutting down"))
        else:
            self._inbox.put(job)
        return job.future

    def generate(
        self, ids: list[int], params: SamplingParams, seed: int | None = None, adapter: bool = True
    ) -> tuple[Sample, int]:
        return self.submit(ids, params, seed, adapter).result()

    # -- server thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._admit(block=not self._jobs)
                for adapter, batch in self.batches.items():
                    if batch:
                        self._step(batch, adapter)
        finally:
            for job in self._jobs:
                _fail(job.future, ServerStopped("the server is shutting down"))
            self._jobs = []
            self._fail_inbox()

    def _admit(self, block: bool) -> None:
        """Move queued requests into their batches: up to `max_batch` rows in all, and about
        `prefill_tokens` prompt tokens per step."""
        budget = self.prefill_tokens
        while len(self._jobs) < self.max_batch and budget > 0:
            try:
                job = self._inbox.get(timeout=IDLE_WAIT) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            if job is None:  # stop() woke us
                return
            block = False
            if job.future.cancelled():
                continue
            try:
                job.row = self.batches[job.adapter].add(job.ids, job.params, job.seed)
            except ValueError as e:  # the engine refuses this request (e.g. too long)
                _fail(job.future, e)
                continue
            if job.row.finish_reason is not None:  # max_new_tokens=0: nothing to sample
                self._finish(job)
                continue
            budget -= len(job.ids)
            self.prompts += 1
            self._jobs.append(job)

    def _step(self, batch: RunningBatch, adapter: bool) -> None:
        jobs = [j for j in self._jobs if j.adapter == adapter]
        for job in jobs:  # cancelled by their callers since the last step
            if job.future.cancelled():
                batch.remove(job.row)
        self.peak_rows = max(self.peak_rows, sum(map(len, self.batches.values())))
        try:
            events = batch.step() if batch else []
        except Exception as e:  # a bug or an engine failure: fail this batch, keep serving
            log.warning("decode step failed: %s", e)
            for job in jobs:
                batch.remove(job.row)
                _fail(job.future, e)
            self._jobs = [j for j in self._jobs if j.adapter != adapter]
            return
        self.steps += 1
        by_row = {id(j.row): j for j in jobs}
        for row, token, logprob in events:
            job = by_row[id(row)]
            if job.on_token is not None and not job.future.done():
                try:
                    job.on_token(token, logprob)
                except Exception as e:  # the listener is gone (e.g. its event loop closed)
                    log.info("dropping a request whose token callback failed: %s", e)
                    job.future.cancel()
        done = [j for j in jobs if j.row.finish_reason is not None or j.future.cancelled()]
        for job in done:
            if job.row.finish_reason is None:
                batch.remove(job.row)
            else:
                self._finish(job)
        if done:
            self._jobs = [j for j in self._jobs if j not in done]

    def _finish(self, job: _Job) -> None:
        try:
            if not job.future.done():
                job.future.set_result(
                    (job.row.sample(self.sampler.tokenizer), self.sampler.version)
                )
        except InvalidStateError:  # cancelled meanwhile
            pass

    def _fail_inbox(self) -> None:
        while True:
            try:
                job = self._inbox.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                _fail(job.future, ServerStopped("the server is shutting down"))


def _fail(future: Future, error: BaseException) -> None:
    try:
        if not future.done():
            future.set_exception(error)
    except InvalidStateError:  # cancelled meanwhile
        pass
