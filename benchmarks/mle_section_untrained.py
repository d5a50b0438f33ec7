"""How the untrained policy fares in an MLE action mode: the share of failed attempts and the
spread of milestone counts (is partial credit informative there?).

    .venv/bin/python benchmarks/mle_section_untrained.py                   # section mode
    .venv/bin/python benchmarks/mle_section_untrained.py --mode template --samples 8

Samples `--samples` replies per competition from SmolLM2-135M-Instruct (adapter untrained: the
policy at step 0) at the training temperature, through the environment's own prompts, parsing,
sandbox, rule instrumenter and reward; generation is batched on one generation server. Prints
per competition and overall: malformed replies, runs that crashed, valid submissions, the
histogram of milestone counts (a malformed reply counts as not run, 0 milestones) and the mean
reward; writes benchmarks/results/mle_{mode}_untrained.json with the machine state and the
first replies.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
COMPETITIONS = [
    "iris-species",
    "breast-cancer-diagnosis",
    "diabetes-progression",
    "wine-cultivar",
    "travel-mode-choice",
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", default="section", choices=["section", "template", "script"])
    p.add_argument("--competitions", nargs="+", default=COMPETITIONS)
    p.add_argument("--samples", type=int, default=4, help="replies per competition")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    state = machine_state()
    logging.basicConfig(level=logging.WARNING)
    from practicum.engine.base import SamplingParams
    from practicum.engine.chat import ChatFormat
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.engine.server import GenerationServer
    from practicum.engine.service import ModelService
    from practicum.envs.base import Task
    from practicum.envs.mle.suite import MleOptions, mle_suite
    from practicum.envs.registry import SuiteContext

    opts = MleOptions(
        mode=args.mode,
        instrumenter="rules",
        held_out=args.competitions[:1],
        train=args.competitions[1:],
        data_root=args.data_root or tempfile.mkdtemp(prefix="mle-untrained-"),
        wall_seconds=60,
    )
    suite = mle_suite(opts, SuiteContext())
    trainable, sampler = load_hf_engine(PolicyConfig(model=args.model, seed=args.seed))
    chat = ChatFormat(trainable.tokenizer)
    server = GenerationServer(sampler).start()
    service = ModelService(server, chat)
    params = SamplingParams(
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        stop_token_ids=tuple(chat.stop_ids()),
    )
    jobs = []
    for cid in args.competitions:
        for k in range(args.samples):
            env = suite.make_env(service)
            start = env.reset(Task(cid, {"competition": cid, "split": "eval"}), seed=k)
            ids = chat.render(start.messages)
            jobs.append((cid, k, env, ids))
    started = time.perf_counter()
    rows = [(ids, params, args.seed * 100_003 + i) for i, (_, _, _, ids) in enumerate(jobs)]
    samples = server.generate_batch(rows, adapter=True)
    gen_seconds = time.perf_counter() - started
    server.stop()

    def run(job_sample):
        (cid, k, env, ids), (sample, _version) = job_sample
        try:
            result = env.step(sample.text)
        finally:
            env.close()
        o = env.last_outcome
        return {
            "competition": cid,
            "sample": k,
            "prompt_tokens": len(ids),
            "reply_tokens": len(sample.token_ids),
            "cut": sample.finish_reason == "length",
            "malformed": result.malformed,
            "crashed": bool(o.crash),
            "valid": o.valid,
            "milestones": len(o.milestones),
            "reached": o.milestones,
            "reward": round(result.reward, 3),
            "parse_error": o.parse_error,
            "failure": o.failure_reason,
            "reply": sample.text[:1200],
        }

    started = time.perf_counter()
    from practicum.runtime.progress import counting

    records = []
    with ThreadPoolExecutor(2) as pool, counting("episodes", len(jobs)) as count:
        for record in pool.map(run, zip(jobs, samples)):
            records.append(record)
            count.advance()
    run_seconds = time.perf_counter() - started

    def summary(recs):
        n = len(recs)
        hist = collections.Counter(r["milestones"] for r in recs)
        return {
            "episodes": n,
            "malformed": sum(r["malformed"] for r in recs) / n,
            "crashed": sum(r["crashed"] for r in recs) / n,
            "valid": sum(r["valid"] for r in recs) / n,
            "failed": sum(not r["valid"] for r in recs) / n,
            "cut_by_token_budget": sum(r["cut"] for r in recs) / n,
            "milestones_hist": {str(m): hist.get(m, 0) for m in range(8)},
            "milestones_mean": statistics.fmean(r["milestones"] for r in recs),
            "milestones_std": statistics.pstdev(r["milestones"] for r in recs),
            "reward_mean": statistics.fmean(r["reward"] for r in recs),
            "reward_std": statistics.pstdev(r["reward"] for r in recs),
        }

    per = {
        cid: summary([r for r in records if r["competition"] == cid]) for cid in args.competitions
    }
    overall = summary(records)
    table = Table(
        title=f"Untrained {args.model} in {args.mode} mode: {args.samples} replies per "
        f"competition, T={args.temperature}, max_new_tokens={args.max_new_tokens}"
    )
    for col in (
        "competition",
        "n",
        "malformed",
        "crashed",
        "valid",
        "cut",
        "milestones 0..7",
        "mean ms",
        "mean reward",
    ):
        table.add_column(col)
    for cid, s in [*per.items(), ("all", overall)]:
        table.add_row(
            cid,
            str(s["episodes"]),
            f"{s['malformed']:.0%}",
            f"{s['crashed']:.0%}",
            f"{s['valid']:.0%}",
            f"{s['cut_by_token_budget']:.0%}",
            " ".join(str(v) for v in s["milestones_hist"].values()),
            f"{s['milestones_mean']:.2f}",
            f"{s['reward_mean']:.2f}",
        )
    console = Console(width=160)
    console.print(table)
    console.print(f"generation {gen_seconds:.0f} s (batched), runs {run_seconds:.0f} s")
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"mle_{args.mode}_untrained.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "_machine": state,
                "mode": args.mode,
                "model": args.model,
                "temperature": args.temperature,
                "max_new_tokens": args.max_new_tokens,
                "samples": args.samples,
                "generation_seconds": round(gen_seconds, 1),
                "run_seconds": round(run_seconds, 1),
                "overall": overall,
                "per_competition": per,
                "episodes": records,
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
