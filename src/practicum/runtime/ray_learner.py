"""The learner in a Ray actor (`placement: {kind: ray, learner: {...}}`).

    driver                                               Ray actor
      loop, store, ledger, GenerationServer                LearnerWorker: HFTrainable + Learner
      RayLearner.train_step(rows) ---------------------->    the step, optimizer, scheduler
                          <----------------- metrics, step
      RayLearner.export_weights(v) --------------------->    the weights to publish, left in
                      <---- RemoteUpdate(v, ObjectRef)       Ray's object store
      RayLearner.save / load(checkpoint folder) -------->    checkpoint files (same filesystem)

The session gets a `RayLearner`, which implements the runtime's `Learner` protocol
(`practicum.runtime.parts`) as the in-driver `practicum.learner.Learner` does. The sampler
cannot share the learner's weights any more, so it loads every published version: an engine
actor (`placement.engine`), which takes it straight from the object store so the weights never
pass through the driver, or an in-driver engine with weights of its own
(`practicum.engine.hf.HFEngineCopy`), for which the export is fetched into the driver.
Checkpoints are written by the actor into the run folder's path, so the actor must see the
driver's filesystem (local Ray, or a shared run folder on a cluster).

A checkpoint is `Learner.save` run in the actor: weights, optimizer, schedule, baselines and
the random generators of the process that trains (dropout draws from them); the driver's
resume state (cursor, ledger, curriculum, open groups) travels with the call. The driver's own
generators need no saving: every sampled turn and model-service call has its own seed.

The learner holds the only copy of the optimizer state: a call that times out
(`placement.call_timeout_s`) or an actor that dies stops the run with `TrainingError`
(the actor is killed); `run.resume=true` continues from the last checkpoint, and the ledger
makes sure no episode is trained twice. RFT and SFT train through the same `train_step`
(cross-entropy rows), so they run here too.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from practicum.engine.base import WeightUpdate
from practicum.engine.hf_model import PolicyConfig
from practicum.errors import ConfigError, TrainingError

log = logging.getLogger(__name__)


class TrainableInActor(ConfigError, AttributeError):
    """The driver asked for the trainable, which only exists in the learner actor."""


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
    """A Ray actor holding the trainable and its `Learner` (driven by `RayLearner`)."""

    def __init__(self, cfg, policy: PolicyConfig):
        from practicum.engine.factory import load_trainable
        from practicum.learner import Learner

        self.learner = Learner(load_trainable(policy), cfg)

    def info(self) -> int:
        return os.getpid()

    def train_step(self, batch) -> tuple[dict | None, int]:
        return self.learner.train_step(batch), self.learner.step

    def export(self, version: int) -> tuple[str, WeightUpdate]:
        update = self.learner.export_weights(version)  # serialised on return: a copy
        return update.kind, update

    def save_checkpoint(self, ckpt_root: Path, extra: dict, keep: int) -> Path:
        return self.learner.save(ckpt_root, extra, keep)

    def load_checkpoint(self, ckpt: Path) -> tuple[dict, int]:
        return self.learner.load(ckpt), self.learner.step

    def save_policy(self, path: Path) -> None:
        self.learner.save_policy(path)


class RemoteLearner:
    """What every learner whose model lives elsewhere (a Ray actor, torchrun ranks) answers the
    same way: each `Learner` call is one `call(what, *args)` to where the model is."""

    cfg: Any
    step: int

    def call(self, what: str, *args) -> Any:
        raise NotImplementedError

    @property
    def temperature(self) -> float:
        return self.cfg.sampling.temperature or 1.0

    def train_step(self, batch) -> dict[str, Any] | None:
        metrics, self.step = self.call("train_step", batch)
        return metrics

    def save(self, ckpt_root: Path, extra: dict[str, Any], keep: int = 2) -> Path:
        return self.call("save_checkpoint", Path(ckpt_root), extra, keep)

    def load(self, ckpt: Path) -> dict[str, Any]:
        extra, self.step = self.call("load_checkpoint", Path(ckpt))
        return extra

    def save_policy(self, path: Path) -> None:
        self.call("save_policy", Path(path))


class RayLearner(RemoteLearner):
    """The runtime's `Learner` (`practicum.runtime.parts`) on a `LearnerWorker` actor. Starts a
    local Ray when none is running (and stops it in `close`).

    export_refs: `export_weights` returns a `RemoteUpdate` left in the object store (for an
    engine actor); False fetches the `WeightUpdate` into the driver (for a sampler here)."""

    def __init__(
        self,
        cfg,
        policy: PolicyConfig,
        *,
        cpus: float = 1.0,
        gpus: float = 0.0,
        timeout: float = 1800.0,
        address: str | None = None,
        export_refs: bool = True,
    ):
        import ray

        from practicum.runtime.ray_cluster import START_SECONDS, start_ray

        self.cfg, self.timeout, self.export_refs = cfg, timeout, export_refs
        self.step = 0
        self._own_ray = start_ray(address)
        self._lock = threading.Lock()
        self.handle = (
            ray.remote(LearnerWorker)
            .options(num_cpus=cpus, num_gpus=gpus, max_restarts=0)
            .remote(cfg, policy)
        )
        try:
            self.pid = ray.get(self.handle.info.remote(), timeout=max(timeout, START_SECONDS))
        except (ray.exceptions.RayError, TimeoutError) as e:
            self.close()
            raise TrainingError(
                f"starting the learner actor failed: {type(e).__name__}: {e}"
            ) from None

    @property
    def trainable(self):
        raise TrainableInActor(
            "config error at placement.learner: the trainable lives in the "
            "learner actor, so this command (it reaches into the model) "
            "needs the learner here (placement.learner: null)"
        )

    # -- the Learner protocol (the rest: RemoteLearner) -----------------------------------------
    def export_weights(self, version: int) -> RemoteUpdate | WeightUpdate:
        """The weights to publish, left in Ray's object store: an engine actor loads them from
        there without a copy through the driver (`RemoteUpdate.fetch` brings them here)."""
        kind, ref = self.call("export", version, num_returns=2)
        update = RemoteUpdate(version, kind, ref, self.timeout)
        return update if self.export_refs else update.fetch()

    def metrics(self) -> dict[str, float]:
        return {}

    def summary(self) -> dict[str, Any]:
        return {"ray_learner_pid": self.pid}

    # -- calls and shutdown -------------------------------------------------------------------
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
        raise TrainingError(
            f"{reason} (pid {self.pid}); resume from the last checkpoint with run.resume=true"
        )

    def close(self) -> None:
        """Kill the actor; stop Ray if this learner started it."""
        import ray

        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            ray.kill(handle, no_restart=True)
        if self._own_ray:
            self._own_ray = False
            ray.shutdown()
