"""Sampler replicas (`placement.engine.replicas: N`): N engine actors behind one
`practicum.engine.base.Sampler`.

    replicas = EngineReplicas.start(engine_cfg, policy, n=2, cpus=1, gpus=1)
    replicas.generate(prompts, params, seeds)   # rows split across the replicas, in parallel
    replicas.load_weights(update)               # every replica; returns once all hold it

Routing: a generate call's rows are cut into one contiguous shard per replica (fewer when there
are fewer rows), the largest shard going to the replica with the fewest rows in flight, and the
shards run in parallel. Per-row arguments travel with their rows: `seeds` and any extra keyword
argument whose value is a list as long as `prompts` (e.g. a per-request constraint) are cut
like the prompts; other keyword arguments reach every replica unchanged. A row's draw depends
on its prompt, its seed and the weights only (the `Sampler` contract), so the same seeds give
the same tokens as one replica.

Versions: `load_weights` puts the update into Ray's object store once, hands it to every
replica in parallel and returns only when all of them hold it; the generation server calls it
inside its update gate, so no row is sampled until every replica serves the new version (each
replica checks the version its actor reports against the one published).

Faults: each replica is a supervised `RayEngine`: a dead actor is replaced by a fresh one that
loads the last published weights, and the call that met it runs once more there. A shard whose
replica still fails (`SamplerFailure`: a timeout, a second death) runs once more on another
replica, so a lost replica loses no episode while one other replica lives.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from practicum.engine.base import Sample, SamplerFailure, SamplingParams
from practicum.engine.hf_model import PolicyConfig

log = logging.getLogger(__name__)


def shard_rows(n_rows: int, loads: list[int]) -> list[tuple[int, range]]:
    """(replica index, rows) per shard: contiguous, as even as possible, the largest to the
    least-loaded replicas (ties: the lower index); shards of no rows are left out."""
    order = sorted(range(len(loads)), key=lambda i: (loads[i], i))
    k = min(n_rows, len(loads))
    size, extra = divmod(n_rows, k) if k else (0, 0)
    out, start = [], 0
    for j, replica in enumerate(order[:k]):
        stop = start + size + (j < extra)
        out.append((replica, range(start, stop)))
        start = stop
    return out


def cut_row_args(n_rows: int, rows: range, seeds, kwargs: dict[str, Any]):
    """The seeds and keyword arguments of `rows`: lists as long as the batch are per row."""

    def cut(v):
        return [v[i] for i in rows] if isinstance(v, (list, tuple)) and len(v) == n_rows else v

    return (None if seeds is None else cut(list(seeds))), {k: cut(v) for k, v in kwargs.items()}


class EngineReplicas:
    """Implements `practicum.engine.base.Sampler` over N replicas, `RayEngine` actors from
    `start` (module doc)."""

    def __init__(self, replicas: list, own_ray: bool = False):
        """Route over started `replicas` (samplers with weights of their own); `own_ray`: stop
        Ray in `close` (it was started for them)."""
        self.replicas = list(replicas)
        self._own_ray = own_ray
        self.version = 0
        self._lock = threading.Lock()
        self._loads = [0] * len(self.replicas)
        """Rows in flight per replica."""
        self.served = [0] * len(self.replicas)
        """Rows handed to each replica (a shard rerun elsewhere counts where it last ran)."""
        from practicum.runtime.ray_engine import Streams

        self._streams = Streams()
        self._pool = ThreadPoolExecutor(
            max_workers=2 * len(self.replicas), thread_name_prefix="replica"
        )

    @classmethod
    def start(
        cls,
        engine_cfg,
        policy: PolicyConfig,
        *,
        n: int,
        cpus: float = 1.0,
        gpus: float = 0.0,
        timeout: float = 1800.0,
        address: str | None = None,
    ) -> EngineReplicas:
        """N `RayEngine` actors started side by side (each loads the model), on a local Ray
        when none is running (stopped again in `close`)."""
        import ray

        from practicum.runtime.ray_cluster import start_ray
        from practicum.runtime.ray_engine import RayEngine

        own_ray = start_ray(address)
        started: list[RayEngine] = []
        with ThreadPoolExecutor(max_workers=n) as pool:
            starts = [
                pool.submit(
                    RayEngine,
                    engine_cfg,
                    policy,
                    cpus=cpus,
                    gpus=gpus,
                    timeout=timeout,
                    address=address,
                )
                for _ in range(n)
            ]
            error = None
            for f in starts:
                try:
                    started.append(f.result())
                except BaseException as e:  # noqa: BLE001 - close the started ones first
                    error = error or e
        if error is not None:
            for r in started:
                r.close()
            if own_ray:
                ray.shutdown()
            raise error
        return cls(started, own_ray)

    # -- the Sampler protocol -------------------------------------------------------------------
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None = None,
        adapter: bool = True,
        **kwargs: Any,
    ) -> list[Sample]:
        with self._lock:
            shards = shard_rows(len(prompts), self._loads)
            for replica, rows in shards:
                self._loads[replica] += len(rows)
        futures = []
        for replica, rows in shards:
            row_seeds, row_kwargs = cut_row_args(len(prompts), rows, seeds, kwargs)
            futures.append(
                self._pool.submit(
                    self._shard,
                    replica,
                    [prompts[i] for i in rows],
                    params,
                    row_seeds,
                    adapter,
                    row_kwargs,
                )
            )
        out: list[Sample] = []
        error: BaseException | None = None
        for f in futures:  # wait for every shard before raising: none runs on unobserved
            try:
                out += f.result()
            except BaseException as e:  # noqa: BLE001 - raised below, after the others end
                error = error or e
        if error is not None:
            raise error
        return out

    def _shard(self, replica: int, prompts, params, seeds, adapter, kwargs) -> list[Sample]:
        ran = replica
        try:
            try:
                return self.replicas[replica].generate(prompts, params, seeds, adapter, **kwargs)
            except SamplerFailure as e:
                if len(self.replicas) == 1:
                    raise
                with self._lock:
                    ran = min(
                        (i for i in range(len(self.replicas)) if i != replica),
                        key=lambda i: self._loads[i],
                    )
                log.warning(
                    "replica %d failed (%s); its %d rows run on replica %d",
                    replica,
                    e,
                    len(prompts),
                    ran,
                )
                return self.replicas[ran].generate(prompts, params, seeds, adapter, **kwargs)
        finally:
            with self._lock:
                self._loads[replica] -= len(prompts)
                self.served[ran] += len(prompts)

    def shares_trainable(self, adapter: bool) -> bool:
        """Never: every replica holds its own copy of the weights."""
        return False

    def load_weights(self, update) -> None:
        """Every replica loads `update` (one copy in Ray's object store); returns once all of
        them hold it. A replica whose actor failed meanwhile was replaced by one loading it."""
        from practicum.runtime.ray_engine import StreamedUpdate, stream_to, to_object_store

        if isinstance(update, StreamedUpdate):  # one weight group with every replica
            stream_to(self.replicas, update, self._streams, self._pool)
            self.version = update.version
            return
        shared = to_object_store(update)
        for f in [self._pool.submit(r.load_weights, shared) for r in self.replicas]:
            f.result()
        self.version = update.version

    # -- reporting and shutdown -------------------------------------------------------------------
    def summary(self) -> dict:
        each = [
            {**r.summary()["ray_engine"], "rows": n} for r, n in zip(self.replicas, self.served)
        ]
        return {
            "ray_engine": {
                "replicas": each,
                "version": self.version,
                "engine_restarts": sum(r["engine_restarts"] for r in each),
            }
        }

    def metrics(self) -> dict[str, float]:
        """Per-step figures for metrics.jsonl (cumulative over the session)."""
        return {"ray_engine_restarts": float(sum(r.restarts for r in self.replicas))}

    def close(self) -> None:
        """Kill every replica's actor; stop Ray if these replicas started it."""
        import ray

        for r in self.replicas:
            try:
                r.close()
            except Exception as e:  # noqa: BLE001 - close the others
                log.error("closing a replica failed: %s", e)
        self.replicas = []
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_ray:
            self._own_ray = False
            ray.shutdown()
