"""What the ranks run in tests/learner/test_sequence.py (importable by name in spawned processes):
a learner step on long rows with sequence parallelism, and the one-process step to compare."""

from __future__ import annotations

import os
import random
from pathlib import Path

import torch

from practicum.config import Config
from practicum.learner.rows import TrainBatch, TrainRow
from tests.ranks import config, one_process_learner, sharded, trainable_weights


def long_rows(
    lengths: tuple[int, ...], seed: int = 0, prompts: tuple[int, ...] = ()
) -> list[TrainRow]:
    """Rows of random ids (a prompt outside the loss, `prompts` tokens, 12 by default, then
    sampled tokens in it) with advantages of either sign and off-policy behaviour log-probs."""
    rng = random.Random(seed)
    rows = []
    for k, n in enumerate(lengths):
        prompt = prompts[k] if prompts else 12
        mask = [0.0] * prompt + [float(rng.random() > 0.1) for _ in range(n - prompt)]
        adv = 1.0 if k % 2 else -0.5
        rows.append(
            TrainRow(
                [rng.randrange(100, 5000) for _ in range(n)],
                mask,
                [adv * m for m in mask],
                [],
                [-rng.uniform(0.5, 6.0) * m for m in mask],
            )
        )
    return rows


def sequence_config(
    model_dir: Path, lora: bool = False, world: int = 1, sequence: int = 1, replicate: int = 1
) -> Config:
    """A KL term (with full fine-tuning its frozen reference runs sequence-parallel too), 2
    updates on the batch (the second with proximal log-probs), no clipping of the gradient;
    `world` torchrun ranks in sequence groups of `sequence`, `replicate` copies (1: one
    process)."""
    extra = ["train.grad_clip=1e6", "train.micro_batch_size=2"]
    if world > 1:
        extra += [
            "placement.kind=torchrun",
            f"placement.ranks={world}",
            f"placement.mesh.sequence={sequence}",
            f"placement.mesh.replicate={replicate}",
        ]
    return config(model_dir, lora, *extra)


def step_report(learner, batch: TrainBatch) -> dict:
    """One training step: its metrics, each update's gradients (whole on every rank) and the
    weights after it (gathered whole on rank 0 when sharded; None elsewhere)."""
    grads = []

    def record(optimizer, args, kwargs):
        grads.append(
            {
                name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad)
                .detach()
                .clone()
                for name, p in learner.model.module.named_parameters()
                if p.requires_grad
            }
        )

    learner.optimizer.register_step_pre_hook(record)
    metrics = learner.train_step(batch)
    return {"metrics": metrics, "grads": grads, "weights": trainable_weights(learner)}


def one_process_step(cfg: Config, batch: TrainBatch) -> dict:
    return step_report(one_process_learner(cfg), batch)


def train_in_sequence_groups(rank: int, model_dir: Path, plans: list[dict], out: Path) -> None:
    """For each plan ({batch, lora, sequence, replicate}): a sharded learner on that mesh
    trains one step on the batch; rank 0 saves the reports to `out`."""
    reports = []
    world = int(os.environ["WORLD_SIZE"])
    for plan in plans:
        cfg = sequence_config(
            model_dir, plan["lora"], world, plan["sequence"], plan.get("replicate", 1)
        )
        reports.append(step_report(sharded(cfg), plan["batch"]))
    if rank == 0:
        torch.save(reports, out)
