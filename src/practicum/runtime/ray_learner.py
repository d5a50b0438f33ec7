"""The learner in a Ray actor (`runtime.backend: ray`, `runtime.ray_learner: actor`).

    driver                                               Ray actor
      loop, store, ledger, GenerationServer                LearnerWorker: HFTrainable + Learner
      RayLearner.train_step(episodes) ------------------>    PPO step, optimizer, scheduler
                          <----------------- metrics, step
      RemoteTrainable.export_weights(v) ---------------->    the weights to publish, left in
                      <---- RemoteUpdate(v, ObjectRef)       Ray's object store
      RayLearner.save / load(checkpoint folder) -------->    checkpoint files (same filesystem)

The session gets a `RemoteTrainable` (tokenizer and pad id in the driver, weights in the actor)
and its `RayLearner`; the loop, the runtimes and resume use them as they use the in-driver
`Learner` and trainable. The sampler cannot share the learner's weights any more, so it loads
every published version: an engine actor (`ray_engine: actor`) or an in-driver engine of its
own (`HeldEngine`). An engine actor loads a version straight from the object store, so the
weights never pass through the driver. Checkpoints are written by the actor into the run
folder's path, so the actor must see the driver's filesystem (local Ray, or a shared run folder
on a cluster).

A checkpoint is `Learner.save` run in the actor: weights, optimizer, schedule, baselines and
the random generators of the process that trains (dropout draws from them); the driver's
resume state (cursor, ledger, curriculum, open groups) travels with the call. The driver's own
generators need no saving: every sampled turn and model-service call has its own seed.

The learner holds the only copy of the optimizer state: a call that times out
(`runtime.ray_call_timeout_s`) or an actor that dies stops the run with `TrainingError`
(the actor is killed); `run.resume=true` continues from the last checkpoint, and the ledger
makes sure no episode is trained twice. Commands that reach into the trainable itself
(`practicum rft`) need `ray_learner: driver`.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from practicum.engine.base import Sample, SamplingParams, WeightUpdate
from practicum.engine.hf_model import PolicyConfig
from practicum.errors import ConfigError, TrainingError

log = logging.getLogger(__name__)


class TrainableInActor(ConfigError, AttributeError):
    """The driver asked for a part of the trainable that only exists in the learner actor."""


def load_trainable(policy: PolicyConfig):
    """An HFTrainable of the policy (no sampler)."""
    from practicum.engine.hf_model import (
        FrozenReference,
        load_lm,
        load_tokenizer,
        pick_device,
        resolve_dtype,
    )
    from practicum.engine.hf_trainable import HFTrainable
    from practicum.engine.models import resolve_model

    path = resolve_model(policy.model)
    device = pick_device(policy.device)
    dtype = resolve_dtype(policy, device)
    return HFTrainable(policy, load_lm(path, dtype, device), load_tokenizer(path),
                       FrozenReference(path, dtype, device))


@dataclass
class RemoteUpdate:
    """A `WeightUpdate` still in Ray's object store (what the learner actor exported)."""

    version: int
    kind: str
    ref: Any
    """ObjectRef of the WeightUpdate."""
    timeout: float = 1800.0
    """Seconds `fetch` may wait for the transfer."""

    def fetch(self) -> WeightUpdate:
        import ray

        return ray.get(self.ref, timeout=self.timeout)


class LearnerWorker:
    """A Ray actor holding the trainable and its `Learner` (made remote by `RemoteTrainable`)."""

    def __init__(self, cfg, policy: PolicyConfig):
        from practicum.learner import Learner

        self.trainable = load_trainable(policy)
        self.learner = Learner(self.trainable, cfg)

    def info(self) -> tuple[int, int]:
        return os.getpid(), self.trainable.pad_id

    def train_step(self, episodes) -> tuple[dict | None, int]:
        return self.learner.train_step(episodes), self.learner.step

    def export(self, version: int) -> tuple[str, WeightUpdate]:
        update = self.trainable.export_weights(version)  # serialised on return: a copy
        return update.kind, update

    def save_checkpoint(self, ckpt_root: Path, extra: dict, keep: int) -> Path:
        return self.learner.save(ckpt_root, extra, keep)

    def load_checkpoint(self, ckpt: Path) -> tuple[dict, int]:
        return self.learner.load(ckpt), self.learner.step

    def save_policy(self, path: Path) -> None:
        self.trainable.save(path)


class RemoteTrainable:
    """The driver's handle on a `LearnerWorker`: the `Trainable` attributes the runtime uses
    (tokenizer, pad_id, export_weights, save); `learner` is the matching `RayLearner`."""

    def __init__(self, cfg, policy: PolicyConfig, *, cpus: float = 1.0, gpus: float = 0.0,
                 timeout: float = 1800.0, address: str | None = None):
        import ray

        from practicum.engine.hf_model import load_tokenizer
        from practicum.engine.models import resolve_model
        from practicum.runtime.ray_envs import START_SECONDS, start_ray

        self.tokenizer = load_tokenizer(resolve_model(policy.model))
        self._own_ray = start_ray(address)
        self.timeout = timeout
        self._lock = threading.Lock()
        self.handle = ray.remote(LearnerWorker).options(
            num_cpus=cpus, num_gpus=gpus, max_restarts=0).remote(cfg, policy)
        try:
            self.pid, self.pad_id = ray.get(self.handle.info.remote(),
                                            timeout=max(timeout, START_SECONDS))
        except (ray.exceptions.RayError, TimeoutError) as e:
            self.close()
            raise TrainingError(f"starting the learner actor failed: {type(e).__name__}: {e}") \
                from None
        self.learner = RayLearner(self, cfg)

    def call(self, what: str, *args, num_returns: int = 1) -> Any:
        """The actor's method `what`, within the timeout; a timeout or a dead actor stops the
        run (`TrainingError`; the actor is killed). num_returns=2: (the first value, an
        ObjectRef of the second, left in Ray's object store)."""
        import ray

        with self._lock:
            if self.handle is None:
                raise TrainingError("the learner actor is gone (see the error before this one)")
            method = getattr(self.handle, what)
            try:
                if num_returns == 1:
                    return ray.get(method.remote(*args), timeout=self.timeout)
                first, rest = method.options(num_returns=2).remote(*args)
                return ray.get(first, timeout=self.timeout), rest
            except ray.exceptions.GetTimeoutError:
                reason = f"learner {what} timed out after {self.timeout:g} s"
            except ray.exceptions.RayActorError as e:
                reason = f"learner actor died during {what} ({type(e).__name__})"
            handle, self.handle = self.handle, None
            ray.kill(handle, no_restart=True)
        raise TrainingError(f"{reason} (pid {self.pid}); resume from the last checkpoint with "
                            "run.resume=true")

    def export_weights(self, version: int) -> RemoteUpdate:
        """The weights to publish, left in Ray's object store: an engine actor loads them from
        there without a copy through the driver (`RemoteUpdate.fetch` brings them here)."""
        kind, ref = self.call("export", version, num_returns=2)
        return RemoteUpdate(version, kind, ref, self.timeout)

    def save(self, path: Path) -> None:
        self.call("save_policy", Path(path))

    def __getattr__(self, name: str):
        # token_logprobs, trainable_parameters, frozen_base, ...: only inside the actor
        if name.startswith("__"):
            raise AttributeError(name)
        raise TrainableInActor(f"config error at runtime.ray_learner: the trainable lives in the "
                          f"learner actor, so {name!r} is not available in the driver (this "
                          "command needs runtime.ray_learner=driver)")

    def close(self) -> None:
        """Kill the actor; stop Ray if this learner started it."""
        import ray

        handle, self.handle = self.__dict__.get("handle"), None
        if handle is not None:
            ray.kill(handle, no_restart=True)
        if self._own_ray:
            ray.shutdown()


class RayLearner:
    """`practicum.learner.Learner`'s interface (step, train_step, save, load, temperature) on
    a `LearnerWorker` actor."""

    def __init__(self, remote: RemoteTrainable, cfg):
        self.remote, self.cfg = remote, cfg
        self.step = 0

    @property
    def temperature(self) -> float:
        return self.cfg.sampling.temperature or 1.0

    def train_step(self, episodes) -> dict[str, Any] | None:
        metrics, self.step = self.remote.call("train_step", episodes)
        return metrics

    def save(self, ckpt_root: Path, extra: dict[str, Any], keep: int = 2) -> Path:
        return self.remote.call("save_checkpoint", Path(ckpt_root), extra, keep)

    def load(self, ckpt: Path) -> dict[str, Any]:
        extra, self.step = self.remote.call("load_checkpoint", Path(ckpt))
        return extra


class HeldEngine:
    """An in-driver sampler of its own for a learner in an actor: an `EngineWorker` (same HF
    engine as the engine actor) used in this process; implements `Sampler`."""

    def __init__(self, policy: PolicyConfig):
        from practicum.runtime.ray_engine import EngineWorker

        self.worker = EngineWorker(policy)
        self.version = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seeds: list[int | None] | None = None, adapter: bool = True) -> list[Sample]:
        return self.worker.generate(prompts, params, seeds, adapter)[0]

    def shares_trainable(self, adapter: bool) -> bool:
        """Never: its own copy of the weights, not the learner actor's."""
        return False

    def load_weights(self, update: WeightUpdate | RemoteUpdate) -> None:
        if isinstance(update, RemoteUpdate):
            update = update.fetch()
        self.version = self.worker.load_weights(update)


def load_placed_engine(cfg, policy: PolicyConfig):
    """(trainable, sampler) placed as `cfg.runtime` says (ray_learner, ray_engine), the sampler
    holding the trainable's weights as version 0."""
    from practicum.runtime.ray_engine import RayEngine

    rt = cfg.runtime
    if rt.ray_learner == "actor":
        trainable: Any = RemoteTrainable(cfg, policy, cpus=rt.ray_learner_cpus,
                                         gpus=rt.ray_learner_gpus, timeout=rt.ray_call_timeout_s,
                                         address=rt.ray_address)
    else:
        trainable = load_trainable(policy)
    try:
        if rt.ray_engine == "actor":
            sampler: Any = RayEngine(policy, cpus=rt.ray_engine_cpus, gpus=rt.ray_engine_gpus,
                                     timeout=rt.ray_call_timeout_s, address=rt.ray_address)
        else:
            sampler = HeldEngine(policy)
        try:
            sampler.load_weights(trainable.export_weights(0))
        except BaseException:
            getattr(sampler, "close", lambda: None)()
            raise
    except BaseException:
        if isinstance(trainable, RemoteTrainable):
            trainable.close()
        raise
    return trainable, sampler
