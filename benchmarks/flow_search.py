"""Your own search data on the flow (README "Your own search data"): scripted planners, no
model, through the real flow env with the rules roles configs/flow.yaml recommends, on a
questions/documents set (default: the hand-written examples/flow_search, its held-out half).

    .venv/bin/python benchmarks/flow_search.py
    .venv/bin/python benchmarks/flow_search.py --questions q.jsonl --corpus docs/

Planners (each reply is a plan in the planner's format; the env's executor, tools, verifier
and generator do the rest, the exact-match check grades):
  look up each chain document   "Look up <title>." for the question's chain in order: what the
                                rules roles reach with a planner that always names the next
                                document (their ceiling on this set)
  the demonstrations' script    envs/flow/demo.py's plans (search the question, then look up
                                the chain's unread documents) run on held-out questions: what
                                the warm start teaches
  search the question           the question as a search, every turn
  copy the question, lookup     the question as a lookup, every turn (what an untrained planner
                                mostly writes)
Writes benchmarks/results/flow_search_scripted.json (solve rate, hop credit, verifier stops,
the questions solved) with the machine block. The trained planner's numbers come from
`practicum train` (records in benchmarks/results/flow_search_run/).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

from practicum.envs.flow.demo import Demonstrator, plan
from practicum.envs.registry import SuiteContext, build_suite

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flow_search"
RULES = {"analyst": "rules", "executor": "rules", "verifier": "rules", "generator": "rules"}


def run_planner(suite, task, act) -> dict:
    """One episode with `act(messages, turn)` writing every planner reply."""
    with suite.make_env(None) as env:
        start = env.reset(task)
        messages = list(start.messages)
        for turn in range(env.max_steps):
            r = env.step(act(messages, turn))
            if r.done:
                return {
                    "solved": r.solved,
                    "hops": r.metrics.get("hops/multihop", 0.0),
                    "verifier_stop": r.metrics["verifier_stop"],
                    "answer": r.info["flow"]["answer"],
                }
            messages = list(r.context)
    raise RuntimeError("the episode outlived its step limit")


def look_up_chain(task):
    chain = task.data["chain"]
    return lambda messages, turn: plan(f"Look up {chain[min(turn, len(chain) - 1)]}.", "lookup")


def search_question(task):
    return lambda messages, turn: plan(task.data["question"], "search")


def lookup_question(task):
    return lambda messages, turn: plan(task.data["question"], "lookup")


def planners(tasks) -> dict:
    demo = Demonstrator(tasks)  # a reference on held-out questions, never training data

    def script(task):
        act = demo(task.task_id)
        return lambda messages, turn: act(messages)

    return {
        "look up each chain document": look_up_chain,
        "the demonstrations' script": script,
        "search the question": search_question,
        "copy the question, lookup": lookup_question,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--questions", default=str(EXAMPLE / "questions.jsonl"))
    p.add_argument("--corpus", default=str(EXAMPLE / "docs"))
    p.add_argument("--eval", type=int, default=14, help="task.options.eval_per_family")
    p.add_argument("--max-steps", type=int, default=4, help="= flow.yaml's max_steps_eval")
    args = p.parse_args()
    started = time.time()
    suite = build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1.0},
            "eval_per_family": args.eval,
            "questions": args.questions,
            "corpus": args.corpus,
            "max_steps_eval": args.max_steps,
            "tools": ["python_coder", "calculator", "search", "lookup"],
        },
        SuiteContext(0),
    )
    tasks = suite.eval_tasks
    result = {}
    for name, make in planners(tasks).items():
        runs = {t.task_id: run_planner(suite, t, make(t)) for t in tasks}
        n = len(runs)
        result[name] = {
            "solved": sum(r["solved"] for r in runs.values()) / n,
            "hops": sum(r["hops"] for r in runs.values()) / n,
            "verifier_stop": sum(r["verifier_stop"] for r in runs.values()) / n,
            "solved_ids": [k for k, r in runs.items() if r["solved"]],
        }
        r = result[name]
        print(
            f"{name:<32} solved {len(r['solved_ids'])}/{n}  hops {r['hops']:.2f}  "
            f"verifier stops {r['verifier_stop']:.2f}"
        )
    dest = ROOT / "benchmarks" / "results" / "flow_search_scripted.json"
    dest.write_text(
        json.dumps(
            {
                "args": vars(args),
                "tasks": len(tasks),
                "planners": result,
                "wall_seconds": time.time() - started,
                "machine": machine_state(),
            },
            indent=1,
        )
    )
    print(f"wrote {dest}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: work folders and rank processes go
    main()
