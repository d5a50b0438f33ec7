"""Third-party agents trained unmodified through the episode-scoped endpoint (`rollout.agent`):
mini-swe-agent on the SWE tasks (configs/swe_agent.yaml) and AIDE on the MLE competitions
(configs/mle_aide.yaml), SmolLM2-135M-Instruct + LoRA, a few RL steps each.

    python benchmarks/agent_endpoint.py                       # both agents, their configs' steps
    python benchmarks/agent_endpoint.py --agents mini --steps 2 -- rollout.group_size=2

Per step it records what the issue asks: reward, episodes, calls per episode, trained tokens,
seconds; per run the continuation rate (calls after an episode's first that continued a
segment), the same over the calls whose messages kept an earlier reply as returned (the rule's
own hit rate), failures and their reasons, and the token-exactness check of every trained turn
against the endpoint's request log (`practicum.agent.exactness`). Results:
benchmarks/results/agent_endpoint.json (with the machine's state); the run folders go to
runs/agent_endpoint/<agent>/ (episodes, request log, metrics, checkpoints; not kept in git).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"mini": ROOT / "configs" / "swe_agent.yaml", "aide": ROOT / "configs" / "mle_aide.yaml"}
VENVS = {"mini": "mini", "aide": "aide"}
RESULTS = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "agent_endpoint"
"""The run folders (episodes, request logs, checkpoints: large, not kept in git)."""


def run_agent(agent: str, steps: int | None, overrides: list[str]) -> dict:
    from practicum.config import load_config
    from practicum.runtime.train import run_training
    from practicum.serve.agents import agent_python

    agent_python(VENVS[agent])  # the agent's own venv, made once
    extra = [
        f"run.out_dir={RUNS}",
        f"run.name={agent}",
        "run.resume=false",
        "rollout.agent.request_log=true",
        *([f"train.steps={steps}"] if steps else []),
        *overrides,
    ]
    cfg = load_config(str(CONFIGS[agent]), extra)
    run_training(cfg, progress=False)
    return collect(agent, cfg.run_dir, extra)


def collect(agent: str, run: Path, overrides: list[str]) -> dict:
    """The figures of a finished run folder (module doc)."""
    from practicum.agent.exactness import check_exactness
    from practicum.store import EpisodeStore, read_ledger

    summary = json.loads((run / "summary.json").read_text())
    seconds = summary["wall_seconds"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    episodes = list(EpisodeStore(run / "episodes.jsonl"))
    training = [e for e in episodes if "batch" in e.info]
    by_step = collections.defaultdict(list)  # the episodes each step saw (trained, filtered)
    for batch in read_ledger(run / "consumed.jsonl"):
        if not batch.get("trained"):  # filtered whole: no step (counted in skipped_batches)
            continue
        for kind in ("trained", "filtered"):
            by_step[batch["step"]] += [episodes[pos] for pos, _ in batch.get(kind, [])]
    step_rows = [r for r in rows if "reward_mean" in r and "step_seconds" in r]
    per_step = []
    for r in step_rows:
        eps = by_step.get(r["step"], [])
        per_step.append(
            {
                "step": r["step"],
                "reward_mean": r["reward_mean"],
                "episodes": len(eps),
                "train_tokens": r.get("train_tokens", 0.0),
                "calls_per_episode": _mean([e.metrics.get("agent_calls", 0) for e in eps]),
                "format_share": _mean([e.metrics.get("agent_format_share", 0) for e in eps]),
                "failures": sum(bool(e.failure) for e in eps),
                "seconds": r["step_seconds"],
                "logprob_gap_max": r.get("logprob_gap_max"),
            }
        )
    calls = sum(e.metrics.get("agent_calls", 0) for e in training)
    continued = sum(e.metrics.get("agent_continued", 0) for e in training)
    kept = sum(e.metrics.get("agent_kept_history", 0) for e in training)
    after_first = calls - sum(1 for e in training if e.metrics.get("agent_calls", 0))
    exact = check_exactness(training, run / "agent_requests.jsonl")
    reasons = collections.Counter((e.failure or "").split(":")[0] for e in training if e.failure)
    return {
        "agent": agent,
        "config": str(CONFIGS[agent].relative_to(ROOT)),
        "overrides": overrides,
        "steps": per_step,
        "episodes": len(training),
        "calls": calls,
        "continued_share": continued / after_first if after_first else None,
        "continued_share_of_kept_history": continued / kept if kept else None,
        "kept_history_calls": kept,
        "failures": dict(reasons),
        "skipped_batches": summary.get("skipped_batches"),
        "logprob_gap": {
            "max": max((r.get("logprob_gap_max", 0) for r in step_rows), default=None),
            "mean": _mean([r["logprob_gap"] for r in step_rows if "logprob_gap" in r]),
        },
        "exactness": {
            "ok": exact.ok,
            "trained_turns": exact.trained_turns,
            "problems": exact.problems[:5],
        },
        "eval_before": (summary.get("eval_before") or {}).get("reward_mean"),
        "eval_after": (summary.get("eval_after") or {}).get("reward_mean"),
        "seconds": seconds,
    }


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", nargs="+", choices=sorted(CONFIGS), default=["mini", "aide"])
    ap.add_argument("--steps", type=int, default=None, help="train.steps (default: config's)")
    ap.add_argument(
        "--collect",
        action="store_true",
        help="only recompute the figures of the agents' finished run folders",
    )
    ap.add_argument("overrides", nargs="*", help="dotted overrides for every agent's config")
    args = ap.parse_args(argv)
    machine = machine_state()  # before each run's start: recorded with the run
    path = RESULTS / "agent_endpoint.json"
    results = json.loads(path.read_text())["runs"] if path.is_file() else {}
    for agent in args.agents:
        if args.collect:
            old = results.get(agent, {})
            results[agent] = {
                **collect(agent, RUNS / agent, old.get("overrides", [])),
                "machine": old.get("machine", machine),
            }
        else:
            results[agent] = {**run_agent(agent, args.steps, args.overrides), "machine": machine}
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"runs": results}, indent=1) + "\n")
        r = results[agent]
        print(
            f"{agent}: {r['episodes']} episodes, {r['calls']} calls, continued "
            f"{r['continued_share']}, exact {r['exactness']['ok']}, {r['seconds']:.0f} s"
        )
        for s in r["steps"]:
            print(
                f"  step {s['step']}: reward {s['reward_mean']:.3f}, {s['episodes']} episodes, "
                f"{s['calls_per_episode']} calls/episode, train_tokens {s['train_tokens']:.0f},"
                f" {s['seconds']:.0f} s"
            )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: sandboxes stop, environments remove their folders
    sys.exit(main())
