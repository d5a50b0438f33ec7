"""`practicum mle run ID SOLUTION.py`: run one solution exactly as the environment would.

The file is sandboxed in a fresh work folder holding only the competition's public files, with
milestone prints inserted (secret nonce), then graded; the command prints the milestones, the
score and the reward breakdown. SOLUTION.py is a whole script (`--mode script`, default) or,
with `--mode template`, the code of the template's region (e.g. `model = Ridge()`), or with
`--mode section` the modelling section (features, fit, `predictions = ...`).

There is no policy being trained here, so the instrumenter is the rules (default), a local
model or an OpenAI-compatible endpoint: `local:smollm2-135m-instruct` is the base model that
`base` would mean in a training run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from practicum.envs.mle.cli.arguments import DATA_HELP, RAW_HELP, mle_data_root
from practicum.errors import PracticumError, read_text_file

NO_POLICY = (
    "--instrumenter {spec}: `mle run` has no live policy to take a frozen base from; "
    "use --instrumenter local:smollm2-135m-instruct (the same base model, loaded here), "
    "openai:<base_url>|<model> or rules"
)


def _positive(cast):
    """An argparse type: a number > 0 (argparse reports anything else as a usage error)."""

    def parse(text: str):
        value = cast(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def add_run_command(sub: argparse._SubParsersAction, parents: list) -> None:
    run = sub.add_parser(
        "run", parents=parents, help="run a solution sandboxed, instrumented and graded"
    )
    run.add_argument("competition", metavar="ID", help="competition id or folder")
    run.add_argument("solution", type=Path, metavar="SOLUTION.py")
    run.add_argument(
        "--mode",
        choices=["script", "template", "section"],
        default="script",
        help="script: the file is the whole script; template: the code of the "
        "template's region; section: the modelling section",
    )
    run.add_argument(
        "--instrumenter",
        default="rules",
        help="rules (default), local:<model>, openai:<base_url>|<model>",
    )
    run.add_argument("--data", type=Path, metavar="DIR", help=DATA_HELP)
    run.add_argument("--raw", type=Path, metavar="DIR", help=RAW_HELP)
    run.add_argument(
        "--wall", type=_positive(float), default=60.0, help="wall-clock limit in seconds"
    )
    run.add_argument("--memory", type=_positive(int), default=2048, help="memory limit in MiB")
    run.add_argument(
        "--backend", choices=["auto", "bwrap", "namespaces"], default="auto", help="sandbox backend"
    )
    run.add_argument(
        "--no-partial-credit", action="store_true", help="milestones earn nothing (the ablation)"
    )
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.set_defaults(func=cmd_run)


def run_solution(args: argparse.Namespace):
    """(RunOutcome, the observation the agent would see, the competition). Raises a
    PracticumError for bad input."""
    from practicum.engine.service import ModelService
    from practicum.envs.base import Task
    from practicum.envs.mle.competitions.loading import load_competition
    from practicum.envs.mle.env import MleEnvFactory
    from practicum.envs.mle.episode_data import load_competition_data
    from practicum.envs.mle.suite import MleOptions, check_instrumenter

    spec = args.instrumenter.strip()
    if spec in ("base", "policy"):
        raise PracticumError(NO_POLICY.format(spec=spec))
    check_instrumenter(spec, "--instrumenter")
    code = read_text_file(args.solution, "solution file")
    comp = load_competition(args.competition, args.competitions)
    opts = MleOptions(
        mode=args.mode,
        instrumenter=spec,
        wall_seconds=args.wall,
        memory_mb=args.memory,
        backend=args.backend,
        partial_credit=not args.no_partial_credit,
        salvage=False,
    )
    comp.prepare(mle_data_root(args.data), raw=args.raw)
    data = load_competition_data(comp, mle_data_root(args.data))
    # a service without a server: rules, a local model or an endpoint
    env = MleEnvFactory(opts, {comp.id: data})(ModelService())
    env.reset(Task(comp.id, {"competition": comp.id, "split": "eval"}), seed=0)
    try:
        result = env.step(f"```python\n{code.rstrip()}\n```")
    finally:
        env.close()
    if env.last_outcome.infra_error is not None:
        raise PracticumError(f"the sandbox failed: {env.last_outcome.infra_error}")
    return env.last_outcome, result.observation, comp


def cmd_run(args: argparse.Namespace) -> int:
    outcome, observation, comp = run_solution(args)
    status = 0 if outcome.valid else 1
    medal = comp.medal(outcome.score) if outcome.valid else None
    if args.json:
        shown = {
            "competition": comp.id,
            **outcome.info(),
            "medal": medal,
            "observation": observation,
        }
        sys.stdout.write(json.dumps(shown, indent=2, default=str) + "\n")
        return status
    table = Table(title=f"{comp.id}: {args.solution}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    reached = outcome.milestones
    table.add_row("milestones", f"{len(reached)}/7  " + (", ".join(reached) or "none"))
    if outcome.valid:
        direction = "lower" if outcome.lower_is_better else "higher"
        table.add_row("score", f"{outcome.score:.6g}  ({outcome.metric}, {direction} is better)")
        table.add_row("medal", medal or "none")
    else:
        table.add_row("valid", "[red]no[/red]")
        reason = outcome.failure_reason or ""
        table.add_row(
            "reason", f"{reason}: {outcome.parse_error}" if outcome.parse_error else reason
        )
    b = outcome.reward
    table.add_row(
        "reward",
        f"{b.total:.4f} = failure {b.failure:g} + milestones "
        f"{b.milestone_credit:.4g} + score {b.score_credit:.6g}",
    )
    rejected = (
        f" (LLM rewrite rejected: {outcome.instrument_rejected})"
        if outcome.instrument_rejected
        else ""
    )
    table.add_row(
        "run", f"{outcome.duration:.2f} s, instrumented by {outcome.instrumenter}{rejected}"
    )
    if outcome.forged_markers:
        table.add_row("forged markers", str(outcome.forged_markers))
    console = Console()
    console.print(table)
    console.print(observation, highlight=False, markup=False)
    return status
