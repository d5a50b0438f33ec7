"""The learner in one process vs sharded over 2 gloo ranks on the CPU (`placement.ranks`,
practicum.learner.sharded): learner tokens/s, parameters each process holds, and whether both end
with the same weights.

SmolLM2-135M-Instruct (LoRA, or full fine-tuning with --full), one synthetic batch per step
(GRPO groups of random tokens with off-policy behaviour log-probs), 2 mini-batches x 1 epoch,
KL to the base on. Each configuration trains the same `--steps` batches from the same start;
the first step is a warm-up and tokens/s is over the others. One process gets every core's
threads; each rank gets its share (cores / ranks). Run it alone (heavy runs one at a time):

    python benchmarks/distributed_learner.py [--full] [--rows 16]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

from _machine import machine_state
from rich.console import Console
from rich.table import Table

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)

OUT = Path(__file__).resolve().parent / "results"


def batch(seed: int, rows: int, length: int):
    """`rows` episodes in groups of 4 (rewards 0 / 1), a 32-token prompt per group, replies of
    about `length` tokens."""
    from practicum.episode import Episode, Turn

    rng = random.Random(seed)
    out = []
    for g in range(rows // 4):
        prompt = [rng.randrange(100, 40000) for _ in range(32)]
        for k in range(4):
            n = rng.randrange(length // 2, length + length // 2)
            turn = Turn(
                [rng.randrange(100, 40000) for _ in range(n)],
                [-rng.uniform(0.5, 6.0) for _ in range(n)],
                0,
            )
            out.append(Episode(f"t{g}", f"{seed}-{g}", prompt, [turn], reward=float(k % 2)))
    return out


def config(full: bool):
    from practicum.config import load_config

    return load_config(
        None,
        [
            "model.model=smollm2-135m-instruct",
            "model.dtype=float32",
            "model.device=cpu",
            f"model.lora={str(not full).lower()}",
            "algo.kl_coef=0.05",
            "train.epochs=1",
            "train.mini_batches=2",
            "train.micro_batch_size=4",
            "train.lr=1e-4",
            "train.warmup_steps=0",
        ],
    )


def train(learner, args) -> dict:
    from practicum.batch import rl_batch_of

    """Train `args.steps` batches; tokens/s over all but the first (warm-up)."""
    seconds, tokens = 0.0, 0.0
    for step in range(args.steps):
        t = time.perf_counter()
        m = learner.train_step(rl_batch_of(batch(step, args.rows, args.length), learner.cfg))
        if step:
            seconds += time.perf_counter() - t
            tokens += m["train_tokens"] * m["updates"]
    update = learner.export_weights(learner.step)
    local = sum(
        p.to_local().numel() if hasattr(p, "to_local") else p.numel()
        for p in learner.model.trainable_parameters()
    )
    return {
        "tokens_per_s": tokens / seconds,
        "trainable_params_per_process": local,
        "weights": None if update is None else update.tensors,
    }


def rank_main(rank: int, args, world: int, port: int, out: str) -> None:
    import torch

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world)
    )
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    init_ranks("cpu", timeout_s=1800)
    cfg = config(args.full)
    result = train(sharded_learner(cfg, policy_config(cfg)), args)
    if rank == 0:
        torch.save(result, out)
    torch.distributed.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    import torch
    import torch.multiprocessing as mp

    from practicum.engine.factory import load_trainable
    from practicum.learner import Learner
    from practicum.runtime.placement import policy_config

    state = machine_state()
    cfg = config(args.full)
    torch.set_num_threads(os.cpu_count() or 1)
    one = train(Learner(load_trainable(policy_config(cfg)), cfg), args)
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        out = str(Path(tmp) / "ranks.pt")
        mp.start_processes(rank_main, (args, 2, port, out), nprocs=2, start_method="spawn")
        two = torch.load(out, weights_only=False)
    diff = max((one["weights"][k] - two["weights"][k]).abs().max().item() for k in one["weights"])
    rows = [
        {
            "ranks": n,
            "threads_per_process": max(1, (os.cpu_count() or 1) // n),
            "tokens_per_s": r["tokens_per_s"],
            "trainable_params_per_process": r["trainable_params_per_process"],
        }
        for n, r in ((1, one), (2, two))
    ]
    kind = "full" if args.full else "lora"
    result = {
        "benchmark": "distributed_learner",
        "model": "smollm2-135m-instruct",
        "fine_tuning": kind,
        "rows": args.rows,
        "reply_tokens": args.length,
        "steps": args.steps,
        "rows_by_ranks": rows,
        "max_abs_weight_diff": diff,
        "machine": state,
        "load_avg_after": os.getloadavg()[0],
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"distributed_learner_{kind}.json").write_text(json.dumps(result, indent=1))
    table = Table(title=f"learner: 1 process vs 2 gloo ranks ({kind}, SmolLM2-135M, CPU)")
    for col in ("ranks", "threads each", "tokens/s", "trainable params per process"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["ranks"]),
            str(r["threads_per_process"]),
            f"{r['tokens_per_s']:.0f}",
            f"{r['trainable_params_per_process']:,}",
        )
    Console().print(table)
    print(f"max |weights 1 process - weights 2 ranks| = {diff:.2e}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
