"""`practicum mle list | prepare | grade | run | evaluate`: the competitions' command line.

`add_mle_commands` fills the `mle` parser (the package registers it as the `mle` command);
every command sets `func`, so the CLI dispatches with `args.func(args)` (an exit code: 0 ok,
1 an invalid submission or a broken folder listed). Bad input raises a `PracticumError`.
`mle run` lives in its own module and `add_mle_commands` registers it; `mle evaluate` runs
episodes in a runtime session that the main CLI lends (`practicum.envs.mle.cli.evaluate`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from practicum.console import table_console
from practicum.envs.mle.cli.arguments import (
    DATA_HELP,
    RAW_HELP,
    competitions_option,
    mle_data_root,
)
from practicum.envs.mle.cli.run import add_run_command


def add_mle_commands(subparsers: argparse._SubParsersAction | argparse.ArgumentParser):
    """Add `list`, `prepare`, `grade` and `run` to the `mle` subparsers; return the subparsers
    action (`evaluate`, which needs a runtime session, is added to it by the package).

    Accepts the `mle` ArgumentParser itself too (its subparsers are then created here).
    """
    sub = subparsers
    if isinstance(subparsers, argparse.ArgumentParser):
        sub = subparsers.add_subparsers(dest="mle_command", metavar="COMMAND", required=True)
    common = competitions_option()

    listing = sub.add_parser("list", parents=[common], help="list the available competitions")
    listing.set_defaults(func=cmd_list)

    prepare = sub.add_parser(
        "prepare", parents=[common], help="build a competition's public and private files"
    )
    prepare.add_argument("competition", metavar="ID", help="competition id or folder")
    prepare.add_argument("--raw", type=Path, metavar="DIR", help=RAW_HELP)
    prepare.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help=DATA_HELP,
    )
    prepare.add_argument("--force", action="store_true", help="prepare again from scratch")
    prepare.set_defaults(func=cmd_prepare)

    grade = sub.add_parser("grade", parents=[common], help="score a submission CSV")
    grade.add_argument("competition", metavar="ID", help="competition id or folder")
    grade.add_argument("submission", type=Path, metavar="SUBMISSION.csv")
    grade.add_argument("--data", type=Path, metavar="DIR", help=DATA_HELP)
    grade.add_argument("--raw", type=Path, metavar="DIR", help=RAW_HELP)
    grade.add_argument("--json", action="store_true", help="print the report as JSON")
    grade.set_defaults(func=cmd_grade)

    add_run_command(sub, [common])
    return sub


# The handlers import the competition machinery (pandas, ...) lazily: building the CLI's
# parser must stay cheap for every other `practicum` command.


def cmd_list(args: argparse.Namespace) -> int:
    from practicum.envs.mle.competitions.config import CompetitionError
    from practicum.envs.mle.competitions.loading import bundled_dir, discover, load_folder

    folders = discover(args.competitions)
    table = Table(title="MLE competitions")
    table.add_column("id", no_wrap=True)
    for column in ("task", "metric", "better", "rows", "teams", "source"):
        table.add_column(column, overflow="fold")
    bundled, broken = bundled_dir(), 0
    for cid, folder in sorted(folders.items()):
        source = "bundled" if folder.parent == bundled else str(folder)
        try:
            comp = load_folder(folder)
        except CompetitionError as err:
            broken += 1
            table.add_row(cid, "[red]broken[/red]", str(err), "", "", "", source)
            continue
        table.add_row(
            cid,
            comp.practicum.task or str(comp.config.get("competition_type", "")),
            comp.metric,
            "lower" if comp.lower_is_better else "higher",
            str(comp.practicum.rows or ""),
            str(len(comp.leaderboard or [])),
            source,
        )
    table_console().print(table)
    return 1 if broken else 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from practicum.envs.mle.competitions.loading import load_competition

    comp = load_competition(args.competition, args.competitions)
    paths = comp.prepare(data_root=mle_data_root(args.data), raw=args.raw, force=args.force)
    table = Table(title=f"{comp.id}: prepared")
    table.add_column("visibility")
    table.add_column("file", overflow="fold")
    for label, folder in (("public", paths.public), ("private", paths.private)):
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            table.add_row(label, str(path))
    Console().print(table)
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from practicum.envs.mle.competitions.grading import grade_submission
    from practicum.envs.mle.competitions.loading import load_competition

    comp = load_competition(args.competition, args.competitions)
    comp.prepare(mle_data_root(args.data), raw=args.raw)
    report = grade_submission(comp, args.submission, data_root=mle_data_root(args.data))
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return 0 if report.valid else 1
    table = Table(title=f"{comp.id}: {args.submission}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    direction = "lower is better" if comp.lower_is_better else "higher is better"
    if report.valid:
        table.add_row("score", f"{report.score:.6g}  ({comp.metric}, {direction})")
        table.add_row("medal", report.medal or "none")
    else:
        table.add_row("valid", "[red]no[/red]")
        table.add_row("reason", report.reason or "")
    if report.thresholds:
        t = report.thresholds
        table.add_row(
            "thresholds",
            f"gold {t['gold']:.6g}, silver {t['silver']:.6g}, bronze {t['bronze']:.6g}, "
            f"median {t['median']:.6g} ({t['n_teams']} teams)",
        )
    Console().print(table)
    return 0 if report.valid else 1
