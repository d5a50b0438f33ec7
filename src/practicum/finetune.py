"""Supervised fine-tuning (SFT, and RFT's SFT step) as learner steps with the cross-entropy
objective: the driver builds the rows, the learner trains them wherever it runs.

    losses = finetune(learner, kept_episodes, cfg.rft, seed)   # one train_step per update

Rejection fine-tuning (arXiv 2508.03501) and demonstration warm starts imitate kept episodes'
policy tokens, malformed turns masked (`practicum.algo.rft.rft_mask`): -log pi, token-mean over
each update's rows (`rft_loss`). The stages that sample and keep the episodes are
`practicum.runtime.rft` and `practicum.runtime.sft`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

from practicum.algo.rft import rft_mask
from practicum.batch import training_rows
from practicum.config import Config
from practicum.episode import Episode
from practicum.learner.rows import TrainBatch, TrainRow
from practicum.runtime.parts import Learner
from practicum.runtime.progress import TrainProgress


def stage_config(cfg: Config, name: str, opts) -> Config:
    """The config of a warm-start stage (rft, sft) inside the run: its run folder moved to
    RUN/<name> (resumable, never cleared), and the learner's optimizer set for its SFT
    updates (`opts`: cfg.rft or cfg.sft): AdamW at opts.lr, constant, torch's default betas and
    weight decay, one update per `train_step`."""
    run = cfg.run.model_copy(update={"out_dir": str(cfg.run_dir), "name": name, "resume": True})
    train = cfg.train.model_copy(
        update={
            "lr": opts.lr,
            "betas": (0.9, 0.999),
            "weight_decay": 0.01,
            "warmup_steps": 0,
            "schedule": "constant",
            "mini_batches": 1,
            "epochs": 1,
        }
    )
    return cfg.model_copy(update={"run": run, "train": train})


def sft_rows(episodes: list[Episode]) -> list[TrainRow]:
    """Cross-entropy rows of `episodes`: every segment's sampled tokens, malformed turns masked
    (`rft_mask`); rows left with nothing to imitate are dropped."""
    rows = []
    for row in training_rows(episodes, [True] * len(episodes)):
        seg = row.segment
        malformed = {k for k, t in enumerate(episodes[row.episode].turns) if t.malformed}
        mask = rft_mask(seg.loss_mask, seg.turn_index, malformed)
        if any(mask):
            rows.append(TrainRow(list(seg.input_ids), [float(m) for m in mask]))
    return rows


def sft_batches(rows: list[TrainRow], epochs: int, batch_size: int, seed: int) -> list[TrainBatch]:
    """`epochs` shuffled passes over `rows` in updates of `batch_size` rows."""
    rng = random.Random(seed)
    out = []
    for _ in range(epochs if rows else 0):
        order = rows[:]
        rng.shuffle(order)
        out += [
            TrainBatch(order[i : i + batch_size], "cross_entropy")
            for i in range(0, len(order), batch_size)
        ]
    return out


def finetune(
    learner: Learner,
    kept: list[Episode],
    opts,
    seed: int,
    progress: bool = False,
    log_dir: Path | None = None,
    log: Callable[[int, dict[str, Any]], None] | None = None,
    label: str = "rft sft",
) -> list[float]:
    """SFT on the kept episodes' clean policy tokens: `opts.epochs` shuffled passes of
    `opts.batch_size` rows per update (`opts`: cfg.rft or cfg.sft), each update one
    `learner.train_step`; returns every update's loss. Progress lines go to `log_dir`'s
    progress.log (prefixed `label`), per-update metrics to `log(update, metrics)`."""
    batches = sft_batches(sft_rows(kept), opts.epochs, opts.batch_size, seed)
    losses: list[float] = []
    with TrainProgress(len(batches), 0, enabled=progress, label=label, log_dir=log_dir) as bar:
        for batch in batches:
            metrics = learner.train_step(batch)
            losses.append(metrics["loss"])
            bar.update(len(losses), {"loss": losses[-1]})
            if log is not None:
                log(len(losses), {"sft_loss": losses[-1], "sft_grad_norm": metrics["grad_norm"]})
    return losses
