"""The LLM instrumenter against the rule instrumenter (arXiv 2509.01684, Sec. 3.2: a frozen
model inserts the milestone prints) on a fixed set of scripts for iris-species.

    .venv/bin/python benchmarks/mle_instrumenter.py                       # SmolLM2-135M base
    .venv/bin/python benchmarks/mle_instrumenter.py --scripts 4 --max-new-tokens 384
    .venv/bin/python benchmarks/mle_instrumenter.py --protocol lines   # line numbers only
    .venv/bin/python benchmarks/mle_instrumenter.py --instrumenter 'openai:http://host:8000|m'

The scripts (benchmarks/data/mle_instrumenter/*.py: honest, partial and no-ML ones) and their
hand-labelled true milestones (truth.json there) are fixed. Each script runs twice through the
environment's own path (script mode, sandbox, evidence-checked milestones): once marked by the
rules, once by the LLM instrumenter, which for `base` is the policy's weights with the adapter
off behind a generation server, exactly as in training (`ModelService`, no second copy). A
rewrite the AST check rejects falls back to the rules, as in training; the table shows both the
LLM alone (a rejected rewrite credits nothing) and the LLM in the loop (with the fallback).

Per script: milestones credited by each, agreement with the rules (same set), rejection and its
reason, cost (seconds of the LLM call, tokens generated). Overall: accuracy (same set as the
rules), precision/recall per milestone against the truth. Writes
benchmarks/results/mle_instrumenter.json with the machine state.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "mle_instrumenter"
COMPETITION = "iris-species"
SHORT = {
    "libraries_imported": "imp",
    "data_loaded": "load",
    "features_prepared": "feat",
    "model_built": "built",
    "model_trained": "fit",
    "validation_scored": "val",
    "predictions_written": "sub",
}


def short(milestones: list[str]) -> str:
    return " ".join(SHORT[m] for m in milestones) or "-"


def build_service(spec: str, model: str):
    """The model service as a training run has it: the policy (LoRA, untrained adapter) behind
    a generation server; `base` then means its weights with the adapter off."""
    from practicum.engine.service import ModelService

    if spec not in ("base", "policy"):
        return ModelService(), None
    from practicum.engine.chat import ChatFormat
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.engine.server import GenerationServer

    trainable, sampler = load_hf_engine(PolicyConfig(model=model))
    server = GenerationServer(sampler).start()
    return ModelService(server, ChatFormat(trainable.tokenizer)), server


class Recording:
    """The service as envs see it, keeping the instrumenter's last raw reply for the report."""

    def __init__(self, service):
        self.service, self.last = service, ""

    def client(self, spec: str):
        inner = self.service.client(spec)
        if inner is None:
            return None
        outer = self

        class Client:
            def complete(self, messages, params=None):
                completion = inner.complete(messages, params)
                outer.last = completion.text
                return completion

        return Client()


def run_script(suite, service, code: str):
    from practicum.envs.base import Task

    with suite.make_env(service) as env:
        env.reset(Task(COMPETITION, {"competition": COMPETITION, "split": "eval"}), seed=0)
        env.step(f"Plan.\n```python\n{code.rstrip()}\n```")
    return env.last_outcome


def precision_recall(rows: list[dict], key: str) -> dict[str, dict[str, float | None]]:
    """Per milestone: precision and recall of `key`'s credited sets against the truth."""
    from practicum.envs.mle.credit.milestones import MILESTONES

    out = {}
    for m in MILESTONES:
        tp = sum(m in r[key] and m in r["truth"] for r in rows)
        fp = sum(m in r[key] and m not in r["truth"] for r in rows)
        fn = sum(m not in r[key] and m in r["truth"] for r in rows)
        out[m] = {
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
        }
    return out


def micro(rows: list[dict], key: str) -> dict[str, float]:
    tp = sum(len(set(r[key]) & set(r["truth"])) for r in rows)
    credited = sum(len(r[key]) for r in rows)
    true = sum(len(r["truth"]) for r in rows)
    return {"precision": tp / credited if credited else 0.0, "recall": tp / true if true else 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--instrumenter",
        default="base",
        help="model-service spec (base, local:<model>, openai:<url>|<model>)",
    )
    p.add_argument("--model", default="smollm2-135m-instruct", help="the policy model (base)")
    p.add_argument("--scripts", type=int, default=0, help="first N scripts only (0: all)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="cap on a rewrite's tokens")
    p.add_argument(
        "--protocol",
        default="rewrite",
        choices=["rewrite", "lines"],
        help="rewrite: the model rewrites the script (paper); lines: it names lines",
    )
    p.add_argument("--data-root", default=None, help="prepared competitions (default: temp)")
    p.add_argument(
        "--out",
        default=None,
        help="default: benchmarks/results/"
        "mle_instrumenter.json (rewrite) or mle_instrumenter_lines.json",
    )
    args = p.parse_args()
    state = machine_state()
    logging.basicConfig(level=logging.WARNING)
    from practicum.envs.mle.suite import MleOptions, mle_suite
    from practicum.envs.registry import SuiteContext

    truth = json.loads((DATA / "truth.json").read_text())
    scripts = sorted(DATA.glob("*.py"))[: args.scripts or None]
    data_root = args.data_root or tempfile.mkdtemp(prefix="mle-instrumenter-")

    def suite(spec: str):
        opts = MleOptions(
            mode="script",
            instrumenter=spec,
            held_out=[COMPETITION],
            train=["wine-cultivar"],
            data_root=data_root,
            wall_seconds=60,
            instrumenter_max_new_tokens=args.max_new_tokens,
            instrumenter_protocol=args.protocol,
        )
        return mle_suite(opts, SuiteContext())

    started = time.perf_counter()
    service, server = build_service(args.instrumenter, args.model)
    load_seconds = time.perf_counter() - started
    rules_suite, llm_suite = suite("rules"), suite(args.instrumenter)
    recording = Recording(service)
    rows = []
    try:
        for path in scripts:
            code = path.read_text()
            ruled = run_script(rules_suite, service, code)
            recording.last = ""
            llm = run_script(llm_suite, recording, code)
            alone = llm.milestones if llm.instrumenter == "llm" else []
            row = {
                "script": path.name,
                "chars": len(code),
                "truth": truth[path.name],
                "rules": ruled.milestones,
                "llm_alone": alone,
                "llm_in_loop": llm.milestones,
                "llm_used": llm.instrumenter == "llm",
                "rejected": llm.instrument_rejected,
                "llm_seconds": round(llm.instrument_seconds, 2),
                "llm_tokens": llm.instrument_tokens,
                "valid": ruled.valid,
                "reward_rules": round(ruled.reward.total, 3),
                "reward_llm": round(llm.reward.total, 3),
                "llm_reply_head": recording.last[:1500],
            }
            row["agree"] = set(alone) == set(ruled.milestones)
            rows.append(row)
            print(
                f"{path.name}: rules [{short(ruled.milestones)}] llm [{short(alone)}] "
                f"{row['llm_seconds']:.1f} s {row['llm_tokens']} tok "
                f"{'used' if row['llm_used'] else 'rejected: ' + str(row['rejected'])}",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()
    n = len(rows)
    summary = {
        "scripts": n,
        "accuracy_llm_vs_rules": sum(r["agree"] for r in rows) / n,
        "accuracy_in_loop_vs_rules": sum(set(r["llm_in_loop"]) == set(r["rules"]) for r in rows)
        / n,
        "exact_vs_truth": {
            k: sum(set(r[k]) == set(r["truth"]) for r in rows) / n
            for k in ("rules", "llm_alone", "llm_in_loop")
        },
        "rejected_rate": sum(not r["llm_used"] for r in rows) / n,
        "llm_seconds_mean": sum(r["llm_seconds"] for r in rows) / n,
        "llm_tokens_mean": sum(r["llm_tokens"] for r in rows) / n,
        "micro_vs_truth": {k: micro(rows, k) for k in ("rules", "llm_alone", "llm_in_loop")},
        "per_milestone_vs_truth": {
            k: precision_recall(rows, k) for k in ("rules", "llm_alone", "llm_in_loop")
        },
        "model_load_seconds": round(load_seconds, 1),
    }
    table = Table(
        title=f"LLM instrumenter ({args.instrumenter}, protocol {args.protocol}) vs "
        f"rules on {COMPETITION}; max_new_tokens {args.max_new_tokens}"
    )
    for col in ("script", "truth", "rules", "LLM alone", "agree", "LLM rewrite", "s", "tokens"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["script"],
            short(r["truth"]),
            short(r["rules"]),
            short(r["llm_alone"]),
            "yes" if r["agree"] else "no",
            "used" if r["llm_used"] else f"rejected: {r['rejected']}",
            f"{r['llm_seconds']:.1f}",
            str(r["llm_tokens"]),
        )
    console = Console(width=200)
    console.print(table)
    for k in ("rules", "llm_alone", "llm_in_loop"):
        m = summary["micro_vs_truth"][k]
        console.print(
            f"{k:12} vs truth: exact set {summary['exact_vs_truth'][k]:.0%}, "
            f"micro precision {m['precision']:.2f} recall {m['recall']:.2f}"
        )
    console.print(
        f"LLM alone = rules' set on {summary['accuracy_llm_vs_rules']:.0%} of scripts; "
        f"rewrite rejected on {summary['rejected_rate']:.0%}; mean cost "
        f"{summary['llm_seconds_mean']:.1f} s and {summary['llm_tokens_mean']:.0f} "
        f"tokens per script (model load {load_seconds:.0f} s)"
    )
    name = "mle_instrumenter.json" if args.protocol == "rewrite" else "mle_instrumenter_lines.json"
    out = Path(args.out or ROOT / "benchmarks" / "results" / name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "_machine": state,
                "instrumenter": args.instrumenter,
                "model": args.model,
                "max_new_tokens": args.max_new_tokens,
                "protocol": args.protocol,
                "competition": COMPETITION,
                "summary": summary,
                "rows": rows,
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
