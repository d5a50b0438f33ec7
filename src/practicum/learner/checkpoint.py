"""Checkpoints of a learner: weights, optimizer, schedule, RNG and the driver's run
state, written atomically, and the pointer to the latest one.

    checkpoints/step_N/policy/      the weights (`Trainable.save`)
    checkpoints/step_N/trainer.pt   step, optimizer, scheduler, skip counters, RNG, `extra`
    checkpoints/latest              the name of the newest complete checkpoint
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from practicum.engine.base import Trainable
from practicum.learner.ranks import Ranks


class Learner(Protocol):
    """What a checkpoint holds of a learner (`practicum.learner.step.Learner`)."""

    model: Trainable
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ranks: Ranks
    step: int
    skipped_nonfinite: int
    nonfinite_in_row: int


def save_checkpoint(learner: Learner, ckpt_root: Path, extra: dict[str, Any],
                    keep: int = 2) -> Path:
    """Write checkpoints/step_N atomically, then point `latest` at it.

    Written to a temp dir first; an existing step_N (a re-save at the same step) is moved
    aside before the rename and deleted only after `latest` points at the new one, so a
    crash at any moment leaves a complete checkpoint that `latest_checkpoint` finds.
    """
    final = ckpt_root / f"step_{learner.step:06d}"
    tmp = ckpt_root / f".tmp_{final.name}"
    aside = ckpt_root / f".aside_{final.name}"
    writer = learner.ranks.rank == 0  # sharded: every rank gathers, rank 0 writes
    if writer:
        ckpt_root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    optimizer = learner.ranks.optimizer_state(learner.optimizer)
    learner.model.save(tmp / "policy")
    if writer:
        torch.save({
            "step": learner.step, "optimizer": optimizer,
            "scheduler": learner.scheduler.state_dict(),
            "nonfinite": [learner.skipped_nonfinite, learner.nonfinite_in_row],
            "extra": extra,
            "rng": _rng_state(),
        }, tmp / "trainer.pt")
        if final.exists():
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
        os.replace(tmp, final)
        latest_tmp = ckpt_root / ".latest.tmp"
        latest_tmp.write_text(final.name)
        latest_tmp.replace(ckpt_root / "latest")
        for stale in ckpt_root.glob(".aside_step_*"):  # incl. one a crash left behind
            shutil.rmtree(stale, ignore_errors=True)
        for old in sorted(ckpt_root.glob("step_*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    learner.ranks.barrier()
    return final


def load_checkpoint(learner: Learner, ckpt: Path) -> dict[str, Any]:
    learner.model.load_weights(ckpt / "policy")
    state = read_trainer_state(ckpt)  # the optimizer moves its state to the params' device
    learner.ranks.load_optimizer_state(learner.optimizer, state["optimizer"])
    learner.scheduler.load_state_dict(state["scheduler"])
    learner.step = state["step"]
    learner.skipped_nonfinite, learner.nonfinite_in_row = state.get("nonfinite", (0, 0))
    _set_rng_state(state["rng"])
    return state["extra"]


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's trainer.pt (step, optimizer, scheduler, skip counters, extra, RNG states), read
    onto the CPU wherever it was written: a GPU learner's checkpoint opens on a CPU driver."""
    return torch.load(Path(ckpt) / "trainer.pt", map_location="cpu", weights_only=False)


def _rng_state() -> dict[str, Any]:
    """The random generators of this process (the one that trains: with
    the learner in a Ray actor, the actor), CUDA's too on a GPU (dropout draws from them)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    saved = state.get("cuda", [])
    if saved and torch.cuda.is_available():  # the devices both machines have
        for i in range(min(len(saved), torch.cuda.device_count())):
            torch.cuda.set_rng_state(saved[i], i)


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The checkpoint `latest` points at; if a crash hit a re-save between moving the old one
    aside and renaming the new one, that moved-aside copy; else None."""
    pointer = ckpt_root / "latest"
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    for path in (ckpt_root / name, ckpt_root / f".aside_{name}"):
        if (path / "trainer.pt").is_file():
            return path
    return None
