"""HF vs vLLM sampler on the same LoRA policy: sampled tokens/s at several batch sizes (adapter
on, and off = the frozen base), the time to publish a new adapter version, and the
engine/learner log-prob gap. Run in the vLLM venv (scripts/vllm_venv.sh):

    PYTHONPATH=src .venv-vllm/bin/python benchmarks/vllm_vs_hf.py [--batches 1 8 32]

SmolLM2-135M-Instruct, fp32, LoRA r16 on all linears with random nonzero weights (merged into a
sampling copy on the HF side, as in training; a LoRA request on the vLLM side), temperature 1,
`--new-tokens` per row (rows may end earlier at their end-of-turn token; tokens/s counts the
tokens returned).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from _machine import machine_state
from rich.console import Console
from rich.table import Table

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.base import SamplingParams
from practicum.engine.hf import PolicyConfig, load_hf_engine

QUESTIONS = [
    "Write a short story about a robot learning to paint.",
    "Explain how a random forest makes predictions.",
    "List five tips for writing clean Python code.",
    "Describe the water cycle to a ten-year-old.",
]


def prompts(tok, n: int) -> list[list[int]]:
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": QUESTIONS[i % 4]}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for i in range(n)
    ]


def timed(sampler, batch: int, new_tokens: int, adapter: bool) -> dict:
    ps = prompts(sampler.tokenizer, batch)
    sampler.generate(ps[:1], SamplingParams(max_new_tokens=2), seeds=[0], adapter=adapter)
    start = time.perf_counter()
    out = sampler.generate(
        ps,
        SamplingParams(temperature=1.0, max_new_tokens=new_tokens),
        seeds=list(range(batch)),
        adapter=adapter,
    )
    seconds = time.perf_counter() - start
    tokens = sum(len(s.token_ids) for s in out)
    return {
        "batch": batch,
        "adapter": adapter,
        "tokens": tokens,
        "seconds": seconds,
        "tok_per_s": tokens / seconds,
        "samples": list(zip(ps, out)),
    }


def gap(trainable, pairs) -> float:
    worst = 0.0
    for prompt, s in pairs:
        ids = torch.tensor([prompt + s.token_ids])
        with torch.no_grad():
            lp = trainable.token_logprobs(ids, torch.ones_like(ids))[0, len(prompt) :]
        worst = max(worst, (lp - torch.tensor(s.logprobs)).abs().max().item())
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", default=None, help="vLLM CPU cores, e.g. 0-1")
    args = ap.parse_args()
    state = machine_state()
    cfg = PolicyConfig(model="smollm2-135m-instruct", dtype="float32")
    trainable, hf = load_hf_engine(cfg)
    torch.manual_seed(0)
    for p in trainable.trainable_parameters():
        torch.nn.init.normal_(p, std=0.01)
    from practicum.engine.vllm import load_vllm_engine
    from practicum.engine.vllm_sampler import VLLMOptions

    start = time.perf_counter()
    _, vl = load_vllm_engine(cfg, VLLMOptions(max_model_len=1024, threads=args.threads))
    startup = time.perf_counter() - start
    publish = {}
    for name, sampler in (("hf", hf), ("vllm", vl)):
        times = []
        for v in (1, 2, 3):
            t = time.perf_counter()
            sampler.load_weights(trainable.export_weights(v))
            times.append(time.perf_counter() - t)
        publish[name] = min(times)
    rows = []
    for name, sampler in (("hf", hf), ("vllm", vl)):
        for adapter in (True, False):
            for b in args.batches:
                r = timed(sampler, b, args.new_tokens, adapter)
                pairs = r.pop("samples")
                r["gap_max"] = gap(trainable, pairs[:4]) if adapter else None
                rows.append({"engine": name, **r})
    table = Table(
        title=f"HF vs vLLM sampling, SmolLM2 fp32 + LoRA r16, {args.new_tokens} "
        f"new tokens (vLLM startup {startup:.0f} s; publish: HF {publish['hf']:.2f} s,"
        f" vLLM {publish['vllm']:.2f} s)"
    )
    for col in ("engine", "adapter", "batch", "tokens", "tok/s", "vLLM/HF", "max |gap|"):
        table.add_column(col, justify="right")
    hf_rate = {(r["adapter"], r["batch"]): r["tok_per_s"] for r in rows if r["engine"] == "hf"}
    for r in rows:
        ratio = r["tok_per_s"] / hf_rate[(r["adapter"], r["batch"])]
        table.add_row(
            r["engine"],
            "on" if r["adapter"] else "off",
            str(r["batch"]),
            str(r["tokens"]),
            f"{r['tok_per_s']:.1f}",
            f"{ratio:.2f}",
            "" if r["gap_max"] is None else f"{r['gap_max']:.1e}",
        )
    Console().print(table)
    out = Path(__file__).parent / "results" / "vllm_vs_hf.json"
    out.write_text(
        json.dumps(
            {
                "machine": state,
                "vllm_threads": args.threads or "default",
                "vllm_startup_s": startup,
                "publish_s": publish,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")
    vl.close()
    os._exit(0)  # vLLM's engine process otherwise delays exit


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
