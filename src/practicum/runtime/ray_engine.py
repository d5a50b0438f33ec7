"""The sampler in a Ray actor (`placement.engine` of a Ray plan).

    driver (where `practicum train` runs)                    Ray actor (this machine or a node)
      learner + HFTrainable (the weights that train)           EngineWorker: an HF engine of
      GenerationServer -> RayEngine (a Sampler proxy)            the same model and config
        generate(prompts, params, seeds, adapter) --------->     HFSampler.generate
                         <--------------- (samples, version)
        load_weights(update) -- CPU tensors, version ------->    weights into its own copy

`RayEngine` implements `practicum.engine.base.Sampler`, so the generation server, the runtimes
and the model service (`policy` = adapter on, `base` = adapter off) use it unchanged. After
every learner update the session publishes `trainable.export_weights(step)`: the proxy copies
the tensors to CPU (the LoRA adapter, or the full state dict), puts them into Ray's object store
once and has the actor load them as that version; the actor sets them into its own model (peft
adapter or state dict) and its sampler (the merged copy is re-merged), then reports the version
with every generate call, which must match the one the driver published: each sampled turn
records the version it came from. Per-request seeds give the same tokens as the in-driver
sampler: the actor runs the same sampling loop on the same weights.

Faults: a call (generate, load_weights) that runs longer than `timeout` seconds, or an actor
that dies, kills the actor and starts a fresh one holding the last published weights. A
generate call that met a dead actor runs once more on the fresh one (sampling is repeatable:
same weights, same seeds); one that timed out (or met a second death) fails with
`EngineFailure`: every episode waiting on it ends as a logged failure
(`practicum.runtime.rollout`), the next turn samples from the new actor. A failed load_weights
is complete once the fresh actor has loaded the same update.

Streamed versions (`engine.weight_sync: broadcast` from a sharded learner, a
`StreamedUpdate`): the learner's rank 0 sends each version over one weight group to every
engine actor (`stream_to`; its store in the driver, formed again when an actor was replaced),
no copy of it in the object store. A replacement actor therefore holds no published weights:
it refuses to sample (`EngineFailure`; replicas send the rows to another one) until the next
version reaches it.

The actor's engine is the one the factory builds for a sampler of `engine.kind` with weights of
its own (for hf `practicum.engine.hf.HFEngineCopy`, the same as the driver's when the learner
is an actor). vLLM runs in an actor where vllm is installed in this Python environment (on
GPUs: scripts/requirements-cuda.txt; the CPU build lives in a venv of its own, so there it runs
in the driver only).
"""

from __future__ import annotations

import logging
import os
import threading

from practicum.engine.base import Sample, SamplerFailure, SamplingParams, WeightUpdate
from practicum.engine.hf_model import PolicyConfig
from practicum.engine.weight_stream import StreamedUpdate

log = logging.getLogger(__name__)


class EngineFailure(SamplerFailure):
    """The engine actor timed out or died during a call (a fresh actor has replaced it)."""


class EngineDied(EngineFailure):
    """The engine actor died (killed, OOM, crashed) before or during a call."""


class EngineWorker:
    """A Ray actor holding a sampler with weights of its own (the factory's, for the engine
    config); it samples and loads weights (driven by `RayEngine`)."""

    def __init__(self, engine_cfg, policy: PolicyConfig):
        from practicum.engine.factory import build_sampler

        self.sampler = build_sampler(engine_cfg, policy)

    def pid(self) -> int:
        return os.getpid()

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None,
        adapter: bool,
        **kwargs,
    ) -> tuple[list[Sample], int]:
        return self.sampler.generate(
            prompts, params, seeds, adapter, **kwargs
        ), self.sampler.version

    def load_weights(self, update: WeightUpdate) -> int:
        self.sampler.load_weights(update)
        return self.sampler.version

    def stream_format(self):
        """What its sampler takes of a weight group (`weight_stream.StreamFormat`), decided
        here, where its devices are."""
        return self.sampler.stream_format()

    def receive_weights(self, version: int, target, rank: int) -> int:
        """Receive a streamed version as members rank, rank + 1, ... (`weight_stream`)."""
        self.sampler.receive_weights(version, target, rank)
        return self.sampler.version


class RayEngine:
    """Implements `practicum.engine.base.Sampler` by calling an `EngineWorker` actor (module
    doc). Starts a local Ray when none is running (and stops it in `close`)."""

    def __init__(
        self,
        engine_cfg,
        policy: PolicyConfig,
        *,
        cpus: float = 1.0,
        gpus: float = 0.0,
        timeout: float = 1800.0,
        address: str | None = None,
    ):
        import ray

        from practicum.runtime.ray_cluster import start_ray

        self._own_ray = start_ray(address)
        self.engine_cfg, self.policy, self.timeout = engine_cfg, policy, timeout
        self._remote = ray.remote(EngineWorker).options(
            num_cpus=cpus, num_gpus=gpus, max_restarts=0
        )
        self._lock = threading.RLock()
        self._weights = None
        """ObjectRef of the last published update (CPU tensors): a replacement actor loads it."""
        self.version = 0
        self.handle = None
        self.pid = 0
        self.started = self.restarts = 0
        self.stream_format = None
        """What the actor's sampler takes of a weight group (`weight_stream.StreamFormat`)."""
        self._streams = Streams()
        self._streamed = self.awaits_stream = False
        """Versions arrive by broadcast; a replacement actor holds none until the next."""
        try:
            self._start()
        except BaseException:
            if self._own_ray:
                ray.shutdown()
            raise

    # -- the Sampler protocol -------------------------------------------------------------------
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None = None,
        adapter: bool = True,
        **kwargs,
    ) -> list[Sample]:
        """Extra keyword arguments (per-request options) reach the actor's sampler unchanged."""
        with self._lock:
            if self.awaits_stream:
                raise EngineFailure(
                    "this engine actor replaced one that died; its weights "
                    "arrive by broadcast with the next published version"
                )
            for attempt in (1, 2):
                if self.handle is None:  # a replacement failed to start last time: try again
                    self._start()
                try:
                    samples, version = self._call(
                        "generate",
                        self.handle.generate.remote(prompts, params, seeds, adapter, **kwargs),
                    )
                    break
                except EngineDied:  # sampling is repeatable: once more on the fresh actor
                    if attempt == 2:
                        raise
            if version != self.version:
                raise EngineFailure(
                    f"engine actor sampled version {version}, the driver published {self.version}"
                )
            return samples

    def shares_trainable(self, adapter: bool) -> bool:
        """Never: the engine actor holds its own copy of the weights."""
        return False

    def load_weights(self, update) -> None:
        """Publish `update` to the actor as version `update.version`: a `WeightUpdate` is
        copied to CPU first (the trainable's live tensors may change as soon as this returns)
        and put into Ray's object store; a `RemoteUpdate` (from a learner actor) is there
        already and goes from the learner's node to the engine's without the driver; a
        `StreamedUpdate` goes from the learner's rank 0 to the actor over a weight group
        (`weight_stream`)."""
        if isinstance(update, StreamedUpdate):
            stream_to([self], update, self._streams)
            return
        ref = to_object_store(update).ref
        with self._lock:
            self._weights = ref
            self.version = update.version
            if self.handle is None:
                self._start()  # loads self._weights
                return
            try:
                self._call("load_weights", self.handle.load_weights.remote(self._weights))
            except EngineFailure:
                pass  # its replacement loaded this update when it started

    def receive(self, version: int, target, rank: int) -> None:
        """The actor receives a streamed version as members rank, rank + 1, ... (supervised:
        a failure replaces the actor, which then awaits the next version)."""
        with self._lock:
            if self.handle is None:
                self._start()
            got = self._call(
                "receive_weights", self.handle.receive_weights.remote(version, target, rank)
            )
            if got != version:
                raise EngineFailure(f"engine actor received version {got}, not {version}")
            self._streamed, self.awaits_stream, self.version = True, False, version

    # -- supervision ------------------------------------------------------------------------------
    def _call(self, what: str, ref):
        """ray.get(ref) within the timeout; on a timeout or a dead actor, replace the actor and
        raise `EngineFailure`. An exception raised by the call itself (e.g. a prompt too long)
        propagates unchanged: the actor is fine."""
        import ray

        error = EngineFailure
        try:
            return ray.get(ref, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            reason = f"engine {what} timed out after {self.timeout:g} s"
        except ray.exceptions.RayActorError as e:
            reason, error = f"engine actor died during {what} ({type(e).__name__})", EngineDied
        pid = self.pid
        log.error("%s (pid %d); starting a fresh engine actor", reason, pid)
        self._replace()
        raise error(f"{reason} (pid {pid})")

    def _start(self) -> None:
        """A new actor, loaded with the last published weights (raises EngineFailure when it
        cannot start within max(timeout, START_SECONDS))."""
        import ray

        handle = self._remote.remote(self.engine_cfg, self.policy)
        from practicum.runtime.ray_cluster import START_SECONDS

        limit = max(self.timeout, START_SECONDS)
        try:
            self.pid = ray.get(handle.pid.remote(), timeout=limit)
            self.stream_format = ray.get(handle.stream_format.remote(), timeout=limit)
            self.awaits_stream = self._streamed
            if self._weights is not None and not self._streamed:
                ray.get(handle.load_weights.remote(self._weights), timeout=limit)
        except (ray.exceptions.RayError, TimeoutError) as e:
            ray.kill(handle, no_restart=True)
            raise EngineFailure(
                f"starting the engine actor failed: {type(e).__name__}: {e}"
            ) from None
        self.handle = handle
        self.started += 1

    def _replace(self) -> None:
        import ray

        handle, self.handle = self.handle, None
        if handle is not None:
            ray.kill(handle, no_restart=True)
        self.restarts += 1
        self._start()

    # -- reporting and shutdown -------------------------------------------------------------------
    def summary(self) -> dict:
        return {
            "ray_engine": {
                "pid": self.pid,
                "engine_actors_started": self.started,
                "engine_restarts": self.restarts,
                "version": self.version,
            }
        }

    def metrics(self) -> dict[str, float]:
        """Per-step figures for metrics.jsonl (cumulative over the session)."""
        return {"ray_engine_restarts": float(self.restarts)}

    def close(self) -> None:
        """Kill the actor; stop Ray if this engine started it."""
        import ray

        with self._lock:
            handle, self.handle = self.handle, None
        if handle is not None:
            ray.kill(handle, no_restart=True)
        if self._own_ray:
            self._own_ray = False
            ray.shutdown()


class Streams:
    """The driver's side of streamed publishing to engine actors (`weight_stream`): the
    rendezvous and the current formation, formed anew when an actor was replaced or a publish
    failed."""

    def __init__(self):
        self.rendezvous = None
        self.target = None
        self._members: tuple = ()

    def target_for(self, engines: list[RayEngine], engine_cfg):
        """The current formation with `engines`' receivers, in the backend and dtype the
        actors report for themselves (a driver without a GPU beside GPU actors: nccl)."""
        from practicum.engine.weight_stream import WeightRendezvous, own_address

        members = tuple((id(e), e.started) for e in engines)
        if self.target is None or members != self._members:
            formats = {(e.stream_format.backend, e.stream_format.dtype) for e in engines}
            if len(formats) > 1:
                raise ValueError(
                    f"engine actors that receive differently cannot share a "
                    f"weight group: {sorted(formats)}"
                )
            ((backend, dtype),) = formats
            transport = (
                "ipc" if getattr(engine_cfg, "weight_transport", "auto") == "ipc" else "collective"
            )
            if transport == "ipc":
                backend = "gloo"  # control messages only (`weight_ipc`)
            if self.rendezvous is None:
                self.rendezvous = WeightRendezvous(own_address() or "127.0.0.1")
            self.target = self.rendezvous.target(
                1 + sum(e.stream_format.receivers for e in engines),
                backend,
                dtype,
                engine_cfg.weight_bucket_mb,
                getattr(engine_cfg, "verify_weights", False),
                transport,
            )
            self._members = members
        return self.target


def stream_to(engines: list[RayEngine], update, streams: Streams, pool=None) -> None:
    """Publish a `StreamedUpdate` to every engine actor in one weight group: the learner's rank
    0 sends while each actor receives (in parallel, on `pool` when there are several)."""
    from practicum.engine.weight_stream import publish

    first = engines[0]
    for e in engines:
        if e.handle is None:
            e._start()
    target = streams.target_for(engines, first.engine_cfg)
    ranks = [1 + sum(e.stream_format.receivers for e in engines[:i]) for i in range(len(engines))]

    def receive() -> None:
        if pool is None or len(engines) == 1:
            for e, rank in zip(engines, ranks):
                e.receive(update.version, target, rank)
            return
        for f in [
            pool.submit(e.receive, update.version, target, rank) for e, rank in zip(engines, ranks)
        ]:
            f.result()

    try:
        publish(update, target, receive)
    except BaseException:
        streams.target = None  # formed anew at the next publish
        raise


def to_object_store(update):
    """`update` as a `RemoteUpdate`: a `WeightUpdate` is copied to CPU (the trainable's live
    tensors may change once this returns) and put into Ray's object store once (replicas all
    read that one copy); a `RemoteUpdate` (from a learner actor) is there already."""
    import ray

    from practicum.runtime.ray_learner import RemoteUpdate

    if isinstance(update, RemoteUpdate):
        return update
    ref = ray.put(
        WeightUpdate(
            update.version,
            update.kind,
            {k: v.detach().to("cpu", copy=True) for k, v in update.tensors.items()},
            dict(update.adapter_config),
        )
    )
    return RemoteUpdate(update.version, update.kind, ref)
