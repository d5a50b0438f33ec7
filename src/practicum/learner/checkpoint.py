"""Checkpoints of a learner: weights, optimizer, schedule, random generators and the driver's
run state. Every rank writes its own part, the commit is one rename, and a checkpoint
resumes at any number of ranks, one process included.

    checkpoints/step_N/trainer.pt        step, scheduler, skip counters, `extra` (the driver's
                                         run state): small, written by rank 0
    checkpoints/step_N/state/            torch.distributed.checkpoint (DCP): the trainable weights
                                         (with LoRA the adapter only) and the AdamW state, keyed by
                                         parameter name; each rank writes its own shards
                                         (`__R_0.distcp`), rank 0 the index (`.metadata`)
    checkpoints/step_N/rng/rank_R.pt     each rank's random generators
    checkpoints/step_N/policy/           the weights as a standalone model or peft adapter
                                         (`Trainable.save`), for stages and serving
    checkpoints/latest                   the name of the newest complete checkpoint

DCP reads each saved shard into whatever layout the loading ranks have, so N ranks, M ranks and
one process (no process group) read the same files (`torch.distributed.checkpoint.state_dict`
names the tensors by parameter, not by rank). For `state/` no rank gathers anything: each holds
and writes only its own shards, and reads only the pieces its new shards need.

Commit: every rank writes into `.tmp_step_N/`, all wait, rank 0 renames it to `step_N` and moves
`latest`, all wait. A crash at any moment leaves the last complete checkpoint in place. The ranks
write into one folder, so across nodes it must be on a filesystem they share: each save checks
that every rank sees the others' files and refuses in one line otherwise.

Format 1 (earlier practicum) kept the whole optimizer state in one process's layout inside
trainer.pt and the weights only in `policy/`; it still loads, at any number of ranks.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from practicum.engine.base import Trainable
from practicum.errors import PracticumError
from practicum.learner.ranks import Ranks

FORMAT = 2
"""trainer.pt's `format`: 2 = sharded DCP state (this module); 1 (no `format` key) = the whole
optimizer in trainer.pt."""

SHARDS = StateDictOptions(ignore_frozen_params=True, strict=False)
"""The trainable parameters only (LoRA: the frozen base comes from the model files), each rank's
shards as they are (DTensors when sharded): nothing is gathered."""


class Learner(Protocol):
    """What a checkpoint holds of a learner (`practicum.learner.step.Learner`)."""

    model: Trainable
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ranks: Ranks
    step: int
    skipped_nonfinite: int
    nonfinite_in_row: int


def save_checkpoint(
    learner: Learner, ckpt_root: Path, extra: dict[str, Any], keep: int = 2
) -> Path:
    """Write checkpoints/step_N (every rank its part), then point `latest` at it; keep the
    newest `keep`. A collective: every rank calls it.

    Written to a temp dir first; an existing step_N (a re-save at the same step) is moved
    aside before the rename and deleted only after `latest` points at the new one, so a
    crash at any moment leaves a complete checkpoint that `latest_checkpoint` finds.
    """
    ranks = learner.ranks
    ckpt_root = Path(ckpt_root)
    require_shared_folder(ranks, ckpt_root)
    final = ckpt_root / f"step_{learner.step:06d}"
    tmp = ckpt_root / f".tmp_{final.name}"
    aside = ckpt_root / f".aside_{final.name}"
    if ranks.rank == 0:
        ckpt_root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    ranks.barrier()  # nobody writes into a leftover temp dir
    rng = rng_state()  # before anything below could draw
    # an optimizer that never stepped has no moments: asking DCP for them would create them
    moments = bool(learner.optimizer.state)
    learner.model.save(tmp / "policy")
    _write_state(learner, tmp / "state", moments)
    (tmp / "rng").mkdir(exist_ok=True)
    torch.save(rng, tmp / "rng" / f"rank_{ranks.rank}.pt")
    if ranks.rank == 0:
        torch.save(
            {
                "format": FORMAT,
                "step": learner.step,
                "world": ranks.world,
                "moments": moments,
                "scheduler": learner.scheduler.state_dict(),
                "nonfinite": [learner.skipped_nonfinite, learner.nonfinite_in_row],
                "extra": extra,
            },
            tmp / "trainer.pt",
        )
    ranks.barrier()  # every rank's files are in tmp
    if ranks.rank == 0:
        if final.exists():
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
        os.replace(tmp, final)
        latest_tmp = ckpt_root / ".latest.tmp"
        latest_tmp.write_text(final.name)
        latest_tmp.replace(ckpt_root / "latest")
        for stale in ckpt_root.glob(".aside_step_*"):  # incl. one a crash left behind
            shutil.rmtree(stale, ignore_errors=True)
        for probe in ckpt_root.glob(".probe_rank*"):  # a crash's; this save's are gone
            probe.unlink(missing_ok=True)
        for old in sorted(ckpt_root.glob("step_*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    ranks.barrier()
    return final


def load_checkpoint(learner: Learner, ckpt: Path) -> dict[str, Any]:
    """Restore `learner` from `ckpt` (written at any number of ranks); returns its `extra`. A
    collective: every rank calls it."""
    ckpt = Path(ckpt)
    ranks = learner.ranks
    blind = [r for r, seen in enumerate(ranks.gather((ckpt / "trainer.pt").is_file())) if not seen]
    if blind:
        raise PracticumError(
            f"learner rank(s) {blind} cannot see checkpoint {ckpt}: a "
            "checkpoint folder must be on a filesystem every node mounts"
        )
    state = read_trainer_state(ckpt)
    fmt = state.get("format", 1)
    if fmt == 1:
        _load_format_1(learner, ckpt, state)
    elif fmt == FORMAT:
        _read_state(learner, ckpt / "state", state["moments"])
        rng = ckpt / "rng" / f"rank_{ranks.rank}.pt"
        if rng.is_file():  # a rank the saving run lacked keeps its own generators
            restore_rng_state(torch.load(rng, map_location="cpu", weights_only=False))
    else:
        raise PracticumError(
            f"checkpoint {ckpt} has format {fmt}; this practicum reads "
            f"formats 1 and {FORMAT} (a newer practicum wrote it)"
        )
    learner.scheduler.load_state_dict(state["scheduler"])
    # the schedule's lr, also where no optimizer state was saved to bring it (no step yet)
    for group, lr in zip(learner.optimizer.param_groups, learner.scheduler.get_last_lr()):
        group["lr"] = lr
    learner.step = state["step"]
    learner.skipped_nonfinite, learner.nonfinite_in_row = state.get("nonfinite", (0, 0))
    return state["extra"]


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's trainer.pt: at least `step` and `extra` (the driver's run state), plus the
    scheduler and skip counters; read without touching the weights or the optimizer state, onto
    the CPU wherever it was written (a GPU learner's checkpoint opens on a CPU driver)."""
    return torch.load(Path(ckpt) / "trainer.pt", map_location="cpu", weights_only=False)


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


def require_shared_folder(ranks: Ranks, folder: Path) -> None:
    """Refuse, in one line on every rank, unless each rank sees the files every other rank
    writes into `folder` (ranks on nodes with their own local disks do not). Each rank writes
    a probe file under a fresh name and looks for everyone's. A collective."""
    if ranks.world == 1:
        return
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".probe_rank{ranks.rank}_{uuid.uuid4().hex}"  # os.urandom: no RNG drawn
    probe.write_text(socket.gethostname())
    try:
        names = ranks.gather((probe.name, socket.gethostname()))
        unseen = [k for k, (name, _) in enumerate(names) if not (folder / name).is_file()]
        report = ranks.gather(unseen)  # every rank has looked before any probe goes
    finally:
        probe.unlink(missing_ok=True)
    blind = [
        f"rank {r} ({names[r][1]}) does not see the files of rank(s) {u}"
        for r, u in enumerate(report)
        if u
    ]
    if blind:
        raise PracticumError(
            f"checkpoint folder {folder} is not shared by the learner ranks: "
            f"{'; '.join(blind)}; put the run folder on a filesystem every "
            "node mounts"
        )


# -- the sharded part: weights and optimizer state (DCP) ----------------------------------------
def _state_dict(learner: Learner, moments: bool) -> dict[str, Any]:
    """This rank's trainable weights (and optimizer state) keyed by parameter name, sharing
    storage with the live tensors."""
    module = learner.model.module
    state = {"model": get_model_state_dict(module, options=SHARDS)}
    if moments:
        state["optimizer"] = get_optimizer_state_dict(module, learner.optimizer, options=SHARDS)
    return state


def _write_state(learner: Learner, path: Path, moments: bool) -> None:
    with _quiet_in_one_process(learner.ranks):
        dcp.save(
            _state_dict(learner, moments), checkpoint_id=path, no_dist=not learner.ranks.in_group
        )


def _read_state(learner: Learner, path: Path, moments: bool) -> None:
    module, optimizer = learner.model.module, learner.optimizer
    # no moments and no gradients: DCP lays out zero moments of the right shards to read into
    optimizer.zero_grad(set_to_none=True)
    optimizer.state.clear()
    state = _state_dict(learner, moments)
    with _quiet_in_one_process(learner.ranks):
        dcp.load(state, checkpoint_id=path, no_dist=not learner.ranks.in_group)
    set_model_state_dict(module, state["model"], options=SHARDS)
    if moments:  # else the saving learner had not stepped yet, and neither has this one
        set_optimizer_state_dict(module, optimizer, state["optimizer"], options=SHARDS)


@contextmanager
def _quiet_in_one_process(ranks: Ranks) -> Iterator[None]:
    """DCP warns when it runs without a process group; in one process that is the intent."""
    with warnings.catch_warnings():
        if not ranks.in_group:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _load_format_1(learner: Learner, ckpt: Path, state: dict[str, Any]) -> None:
    """An earlier practicum's checkpoint: the weights from `policy/`, the whole optimizer (one
    process's layout) from trainer.pt, the generators of the process that saved it."""
    learner.model.load_weights(ckpt / "policy")
    learner.ranks.load_optimizer_state(learner.optimizer, state["optimizer"])
    restore_rng_state(state["rng"])


# -- random generators --------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """The random generators of this process (one that trains: with runtime.ray_learner=actor,
    the actor), CUDA's too on a GPU (dropout draws from them)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    saved = state.get("cuda", [])
    if saved and torch.cuda.is_available():  # the devices both machines have
        for i in range(min(len(saved), torch.cuda.device_count())):
            torch.cuda.set_rng_state(saved[i], i)
