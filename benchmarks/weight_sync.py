"""Seconds to publish a new policy version to a sampler: LoRA and full weights, to the HF
sampler (sharing the trainable, and with weights of its own as in an engine actor) and to vLLM
(full weights in memory through collective_rpc vs through a safetensors file vs broadcast over
a gloo weight group with vLLM's worker process; the LoRA adapter reloaded in place). Run in the
vLLM venv (scripts/vllm_venv.sh), under the shared lock:

    PYTHONPATH=src .venv-vllm/bin/python benchmarks/weight_sync.py
    PYTHONPATH=src .venv/bin/python benchmarks/weight_sync.py --no-vllm     # HF rows only
    PYTHONPATH=src .venv-vllm/bin/python benchmarks/weight_sync.py --full-only \
        --out benchmarks/results/weight_sync_full.json     # the three full-weight vLLM paths
    PYTHONPATH=src .venv-vllm/bin/python benchmarks/weight_sync.py --full-only --verify \
        --out benchmarks/results/weight_sync_verify.json   # each path with and without the
                                                           # post-sync check (verify_weights)

From a sharded learner (4 gloo ranks, a random Llama: `--sharded tiny|0.5b`), full weights
to a bare gloo receiver, streamed (every rank gathers a tensor at a time, rank 0 sends buckets)
against today's gathered path (the whole state on rank 0's CPU, then sent), with each rank's
and the receiver's peak memory above pre-publish against the streamed path's bound
(benchmarks/sharded_publish.py):

    PYTHONPATH=src .venv/bin/python benchmarks/weight_sync.py --sharded 0.5b \
        --out benchmarks/results/weight_sync_sharded.json

SmolLM2-135M-Instruct, fp32, LoRA r16 on all linears (the model section's defaults). Each row
is the median of `--repeats` publishes of fresh weights (every tensor changed), timed from
`sampler.load_weights(trainable.export_weights(v))` to its return; a greedy 4-token draw after
each publish checks that the engine serves it (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from _machine import machine_state
from rich.console import Console
from rich.table import Table

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.base import SamplingParams
from practicum.engine.hf import HFEngineCopy, PolicyConfig, load_hf_engine

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]
DEFAULT_OUT = Path(__file__).parent / "results" / "weight_sync.json"


def perturb(trainable, seed: int) -> None:
    """New weights for every trainable tensor (LoRA A and B, or the whole model)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in trainable.trainable_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)


def publish_seconds(trainable, sampler, repeats: int) -> tuple[float, int]:
    prompt = trainable.tokenizer.apply_chat_template(
        PROMPT, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    times = []
    for v in range(1, repeats + 1):
        perturb(trainable, v)
        update = trainable.export_weights(v)
        start = time.perf_counter()
        sampler.load_weights(update)
        times.append(time.perf_counter() - start)
        sampler.generate([prompt], SamplingParams(temperature=0, max_new_tokens=4))
        assert sampler.version == v
    unique = {t.data_ptr(): t for t in update.tensors.values()}  # a tied lm_head once
    mb = sum(t.numel() * t.element_size() for t in unique.values()) / 2**20
    return statistics.median(times), round(mb)


def vllm_rows(
    trainable, policy: PolicyConfig, kind: str, repeats: int, verify: bool = False
) -> list[dict]:
    """One vLLM engine holding the trainable's weights; each publishing path in turn (with
    `verify`, full weights: each path again with the post-sync check on)."""
    from practicum.engine.options import VLLMOptions
    from practicum.engine.vllm import build_sampler

    start = time.perf_counter()
    vl = build_sampler(VLLMOptions(max_model_len=512), policy, trainable)
    startup = time.perf_counter() - start
    paths = (
        [("peft folder, reloaded in place", None)]
        if kind == "lora"
        else [
            ("collective_rpc, bytes in memory", "memory"),
            ("safetensors file", "file"),
            ("broadcast, gloo weight group", "broadcast"),
        ]
    )
    rows = []
    for label, sync in paths:
        for check in (False, True) if verify and sync is not None else (False,):
            if sync is not None:
                vl.options.weight_sync = sync
            vl.options.verify_weights = check
            secs, mb = publish_seconds(trainable, vl, repeats)
            rows.append(
                {
                    "engine": "vllm",
                    "weights": kind,
                    "path": label + (" + post-sync check" if check else ""),
                    "mb": mb,
                    "seconds": secs,
                    "startup_s": startup,
                }
            )
    vl.close()
    return rows


def sharded_rows(args, state: dict) -> None:
    """`--sharded`: the random Llama written once, both paths measured (sharded_publish)."""
    import tempfile

    from sharded_memory import MODELS, write_random_llama
    from sharded_publish import measure

    with tempfile.TemporaryDirectory(prefix="practicum-llama-") as tmp:
        params = write_random_llama(Path(tmp) / "llama", MODELS[args.sharded])
        result = measure(Path(tmp) / "llama", args.bucket_mb, args.repeats)
    table = Table(
        title=f"Publishing from 4 sharded ranks, random {args.sharded} Llama "
        f"({params / 1e9:.2f}B, fp32; median of {args.repeats}; load "
        f"{result['load_avg_1min_before']:.1f} on {state['cpus']} cpus)"
    )
    for col in ("path", "MB", "s", "rank peaks MB", "receiver MB", "bound MB"):
        table.add_column(col, justify="right")
    for r in result["rows"]:
        table.add_row(
            r["path"],
            str(r["mb"]),
            f"{r['seconds']:.2f}",
            " ".join(map(str, r["rank_peak_above_before_mb"])),
            str(r["receiver_peak_above_before_mb"]),
            str(r["bound_mb"]),
        )
    Console().print(table)
    out = args.out if args.out != DEFAULT_OUT else DEFAULT_OUT.with_name("weight_sync_sharded.json")
    out.write_text(
        json.dumps(
            {
                "machine": state,
                "model": args.sharded,
                "parameters": params,
                "repeats": args.repeats,
                **result,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-vllm", action="store_true", help="HF rows only (no vLLM venv)")
    ap.add_argument(
        "--full-only",
        action="store_true",
        help="full weights to vLLM only (its three paths, one engine)",
    )
    ap.add_argument(
        "--verify",
        action="store_true",
        help="full weights to vLLM: time each path with the post-sync check too",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--sharded",
        choices=("tiny", "0.5b"),
        help="only the sharded rows: 4 ranks publishing a random Llama of this "
        "shape, streamed vs gathered (benchmarks/sharded_publish.py)",
    )
    ap.add_argument(
        "--bucket-mb", type=float, default=256.0, help="--sharded: engine.weight_bucket_mb"
    )
    args = ap.parse_args()
    state = machine_state()
    if args.sharded:
        return sharded_rows(args, state)
    rows = []
    for kind in ("full",) if args.full_only else ("lora", "full"):
        policy = PolicyConfig(model="smollm2-135m-instruct", dtype="float32", lora=kind == "lora")
        trainable, shared = load_hf_engine(policy)
        if not args.full_only:
            secs, mb = publish_seconds(trainable, shared, args.repeats)
            rows.append(
                {
                    "engine": "hf (shares the trainable)",
                    "weights": kind,
                    "path": "in process",
                    "mb": mb,
                    "seconds": secs,
                }
            )
            copy = HFEngineCopy(policy)
            secs, mb = publish_seconds(trainable, copy, args.repeats)
            rows.append(
                {
                    "engine": "hf (own copy, as in an actor)",
                    "weights": kind,
                    "path": "in memory",
                    "mb": mb,
                    "seconds": secs,
                }
            )
            del copy
        del shared
        if not args.no_vllm:
            rows += vllm_rows(trainable, policy, kind, args.repeats, args.verify)
    table = Table(
        title=f"Publishing a policy version, SmolLM2-135M fp32 (median of "
        f"{args.repeats}; cpu busy {state['busy_before']:.0%} at start)"
    )
    for col in ("engine", "weights", "path", "MB", "seconds"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["engine"], r["weights"], r["path"], str(r["mb"]), f"{r['seconds']:.3f}")
    Console().print(table)
    out = args.out
    out.write_text(json.dumps({"machine": state, "repeats": args.repeats, "rows": rows}, indent=1))
    print(f"wrote {out}")
    os._exit(0)  # vLLM's engine process otherwise delays exit


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
