"""`practicum mle run ID SOLUTION.py`: run one solution exactly as the environment would.

The file is sandboxed in a fresh work folder holding only the competition's public files, with
milestone prints inserted (secret nonce), then graded; the command prints the milestones, the
score and the reward breakdown. SOLUTION.py is a whole script (`--mode script`, default) or,
with `--mode template`, the code of the template's region (e.g. `model = Ridge()`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table


def add_run_command(sub: argparse._SubParsersAction, parents: list) -> None:
    run = sub.add_parser("run", parents=parents,
                         help="run a solution sandboxed, instrumented and graded")
    run.add_argument("competition", metavar="ID", help="competition id or folder")
    run.add_argument("solution", type=Path, metavar="SOLUTION.py")
    run.add_argument("--mode", choices=["script", "template"], default="script",
                     help="script: the file is the whole script; template: the code of the "
                     "template's region")
    run.add_argument("--instrumenter", default="rules",
                     help="rules (default), policy_base (with --model), local:<model>, "
                     "openai:<base_url>|<model>")
    run.add_argument("--model", default="smollm2-135m-instruct",
                     help="base model for --instrumenter policy_base")
    run.add_argument("--data", type=Path, metavar="DIR", help="data root (as for prepare)")
    run.add_argument("--wall", type=float, default=60.0, help="wall-clock limit in seconds")
    run.add_argument("--memory", type=int, default=2048, help="memory limit in MiB")
    run.add_argument("--backend", default="auto", help="sandbox backend: auto, bwrap, namespaces")
    run.add_argument("--no-partial-credit", action="store_true",
                     help="milestones earn nothing (the ablation)")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.set_defaults(func=cmd_run)


def run_solution(args: argparse.Namespace) -> tuple[dict, str]:
    """(step info + reward + observation, the competition id). Raises CompetitionError,
    ValueError or OSError for bad input."""
    from practicum.envs.base import Task
    from practicum.envs.mle.competition_registry import load_competition
    from practicum.envs.mle.env import MleEnv, load_competition_data
    from practicum.envs.mle.instrumenters import make_instrumenter
    from practicum.envs.mle.suite import MleOptions, settings_of

    comp = load_competition(args.competition, args.competitions)
    code = args.solution.read_text()
    opts = MleOptions(mode=args.mode, instrumenter=args.instrumenter, wall_seconds=args.wall,
                      memory_mb=args.memory, backend=args.backend,
                      partial_credit=not args.no_partial_credit, salvage=False)
    data = load_competition_data(comp, args.data)
    llm = make_instrumenter(args.instrumenter, args.model)
    env = MleEnv(settings_of(opts), {comp.id: data}, llm=llm)
    env.reset(Task(comp.id, {"competition": comp.id, "split": "eval"}))
    try:
        result = env.step(f"```python\n{code.rstrip()}\n```")
    finally:
        env.close()
    info = dict(result.info)
    info.update(reward=result.reward, observation=result.observation)
    return info, comp.id


def cmd_run(args: argparse.Namespace) -> int:
    from practicum.envs.mle.competition_config import CompetitionError

    try:
        info, cid = run_solution(args)
    except (CompetitionError, ValueError, OSError) as err:
        Console(stderr=True).print(f"[red]practicum:[/red] {err}", highlight=False)
        return 2
    if args.json:
        shown = {k: v for k, v in info.items() if k != "solution"}
        sys.stdout.write(json.dumps(shown, indent=2, default=str) + "\n")
        return 0 if info["valid"] else 1
    console = Console()
    table = Table(title=f"{cid}: {args.solution}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    milestones = info["milestones"]
    table.add_row("milestones", f"{len(milestones)}/7  " + (", ".join(milestones) or "none"))
    if info["valid"]:
        direction = "lower" if info["lower_is_better"] else "higher"
        table.add_row("score", f"{info['score']:.6g}  ({info['metric']}, {direction} is better)")
    else:
        table.add_row("valid", "[red]no[/red]")
        table.add_row("reason", str(info["failure_reason"]))
    b = info["reward_breakdown"]
    table.add_row("reward", f"{b['total']:.4f} = failure {b['failure']:g} + milestones "
                  f"{b['milestone_credit']:.4g} + score {b['score_credit']:.6g}")
    table.add_row("run", f"{info.get('duration', 0.0):.2f} s, instrumented by "
                  f"{info.get('instrumenter', 'n/a')}"
                  + (f" (LLM rewrite rejected: {info['instrument_rejected']})"
                     if info.get("instrument_rejected") else ""))
    if info.get("forged_markers"):
        table.add_row("forged markers", str(info["forged_markers"]))
    console.print(table)
    console.print(info["observation"], highlight=False, markup=False)
    return 0 if info["valid"] else 1
