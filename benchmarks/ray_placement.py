"""The sampler in the driver vs in a Ray engine actor (`placement.engine`): sampling
tokens/s at each batch size, and the seconds one LoRA publish takes (export, copy to CPU, into
Ray's object store, loaded and merged by the actor; in the driver: the merge alone).

SmolLM2-135M-Instruct with a LoRA adapter whose B matrices are random (as after training),
seeded sampling at temperature 1, one torch thread in each process (run it alone on the
machine: heavy runs one at a time). Both placements draw the same tokens; the table says
so per batch size.

    python benchmarks/ray_placement.py [--batches 1 8] [--tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _machine import machine_state  # noqa: E402

import practicum  # noqa: F401,E402  (sets HF_HUB_OFFLINE)

OUT = Path(__file__).resolve().parent / "results" / "ray_placement.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import ray
    import torch

    from practicum.engine.base import SamplingParams
    from practicum.engine.chat import ChatFormat
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.engine.options import HFOptions
    from practicum.runtime.ray_engine import RayEngine

    state = machine_state()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    policy = PolicyConfig(model="smollm2-135m-instruct", dtype="float32")
    trainable, local = load_hf_engine(policy)
    t0 = time.perf_counter()
    engine = RayEngine(HFOptions(), policy, cpus=1)
    start_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trainable.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)

    publish = {"driver": [], "actor": []}
    for version in range(1, args.repeats + 1):
        for where, sampler in (("driver", local), ("actor", engine)):
            t = time.perf_counter()
            sampler.load_weights(trainable.export_weights(version))
            publish[where].append(time.perf_counter() - t)

    prompt = ChatFormat(trainable.tokenizer).render(
        [{"role": "user", "content": "Write a short story about a robot."}]
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    rows = []
    for batch in args.batches:
        seeds = list(range(batch))
        row = {"batch": batch}
        draws = {}
        for where, sampler in (("driver", local), ("actor", engine)):
            sampler.generate([prompt] * batch, params, seeds)  # warm-up
            times, n = [], 0
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = sampler.generate([prompt] * batch, params, seeds)
                times.append(time.perf_counter() - t)
                n = sum(len(s.token_ids) for s in out)
            draws[where] = [s.token_ids for s in out]
            row[f"{where}_tokens_per_s"] = n / statistics.median(times)
        row["actor_vs_driver"] = row["actor_tokens_per_s"] / row["driver_tokens_per_s"]
        row["same_tokens"] = draws["driver"] == draws["actor"]
        rows.append(row)
    engine.close()
    ray.shutdown()

    table = Table(
        title=f"sampler placement, SmolLM2-135M LoRA r{policy.lora_r}, fp32, "
        f"{args.tokens} new tokens"
    )
    for col in ("batch", "driver tok/s", "actor tok/s", "actor / driver", "same tokens"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["batch"]),
            f"{r['driver_tokens_per_s']:.1f}",
            f"{r['actor_tokens_per_s']:.1f}",
            f"{r['actor_vs_driver']:.2f}",
            str(r["same_tokens"]),
        )
    console = Console()
    console.print(table)
    pub = {k: statistics.median(v) for k, v in publish.items()}
    console.print(
        f"LoRA publish (median of {args.repeats}): driver {pub['driver']:.3f} s, "
        f"actor {pub['actor']:.3f} s; engine actor start {start_s:.1f} s"
    )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "machine": state,
                "args": vars(args),
                "rows": rows,
                "publish_seconds": pub,
                "actor_start_seconds": start_s,
            },
            indent=1,
        )
    )
    console.print(f"wrote {OUT}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
