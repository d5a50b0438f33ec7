"""The roles the runtime holds, whatever runs them and wherever they run.

    Part      metrics() per step, summary() per run, close()        every placed piece
    Learner   a Part that trains: step, train_step, export_weights, save / load, save_policy

The in-process `practicum.learner.Learner`, the Ray learner actor's handle
(`practicum.runtime.ray_learner.RayLearner`) and the sharded learner's ranks
(`practicum.runtime.learner_group`: a Ray actor group, or torchrun's rank 0) implement
`Learner`; samplers (`practicum.engine.base.Sampler`) and the Ray environment pool implement
`Part`. `practicum.runtime.placement` builds them; the loop and the runtimes only see these
protocols and never ask where a piece runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from practicum.engine.base import Trainable
    from practicum.learner.rows import TrainBatch


class Part(Protocol):
    def metrics(self) -> dict[str, float]:
        """Per-step figures for metrics.jsonl (may be cumulative over the session)."""
        ...

    def summary(self) -> dict[str, Any]:
        """Run-level entries for summary.json, each under its own top-level key."""
        ...

    def close(self) -> None:
        """Release what it holds (actors, processes, files); safe to call twice."""
        ...


class Learner(Part, Protocol):
    step: int
    """Training steps taken (the policy version of the weights it exports)."""

    @property
    def temperature(self) -> float:
        """The temperature log-probs are taken at (the sampling temperature)."""
        ...

    @property
    def trainable(self) -> Trainable:
        """The model it differentiates, when it lives in this process (tests and benchmarks
        reach into it); a learner elsewhere raises `ConfigError` naming the setting that placed
        it."""
        ...

    def train_step(self, batch: TrainBatch) -> dict[str, Any] | None:
        """One step on rows the driver built (any objective: `practicum.learner.step`); None
        when no row had a token to train on (no step)."""
        ...

    def export_weights(self, version: int) -> Any:
        """The current weights for a sampler to load as `version` (a `WeightUpdate`, or a
        handle a remote sampler resolves itself)."""
        ...

    def save(self, ckpt_root: Path, extra: dict[str, Any], keep: int = 2) -> Path:
        """A complete checkpoint under ckpt_root (weights, optimizer, schedule, RNG, `extra`)."""
        ...

    def load(self, ckpt: Path) -> dict[str, Any]:
        """Restore a checkpoint written by `save`; returns its `extra`."""
        ...

    def save_policy(self, path: Path) -> None:
        """Write the policy's weights alone (a peft adapter or an HF model folder)."""
        ...
