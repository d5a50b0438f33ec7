"""`practicum swe list | show | run | check | synthesize`: the SWE task suite's command line.

    practicum swe list                         # the bundled suite (or --instances FILE)
    practicum swe show TASK [--gold]
    practicum swe run TASK PATCH_FILE [--json]  # grade a patch, print the verdict
    practicum swe check [--tasks N]             # every gold patch resolves, the empty one none
    practicum swe synthesize PACKAGE... --out DIR

Exit codes: 0 ok; 1 a check failed or a patch is unresolved (`run`). Bad input raises a
`PracticumError` naming it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from practicum.console import table_console
from practicum.envs.registry import CommandHost, register_command
from practicum.envs.swe.instance import InstanceError, SweInstance, load_instances
from practicum.errors import PracticumError, read_text_file


def _instances(args) -> list[SweInstance]:
    from practicum.tasks.swe import bundled_instances_path

    return load_instances(args.instances or bundled_instances_path())


def _find(instances: list[SweInstance], task: str) -> SweInstance:
    for inst in instances:
        if inst.instance_id == task:
            return inst
    close = [i.instance_id for i in instances if task in i.instance_id][:5]
    hint = f"; did you mean {', '.join(close)}" if close else ""
    raise InstanceError(f"no task {task!r} in the suite ({len(instances)} tasks){hint}")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        transient=False,
    )


def package_of(inst: SweInstance) -> str:
    return str(inst.meta.get("package") or inst.repo.split("/")[-1])


def cmd_list(args) -> int:
    instances = _instances(args)
    table = Table(title=f"{len(instances)} SWE tasks")
    for col in ("task", "package", "tier", "F2P", "P2P"):
        table.add_column(col)
    for inst in instances:
        table.add_row(
            inst.instance_id,
            package_of(inst),
            str(inst.tier),
            str(len(inst.FAIL_TO_PASS)),
            str(len(inst.PASS_TO_PASS)),
        )
    table_console().print(table)
    counts = Counter((package_of(i), i.tier) for i in instances)
    for pkg in sorted({p for p, _ in counts}):
        tiers = ", ".join(
            f"tier {t}: {counts[(pkg, t)]}" for t in sorted(t for p, t in counts if p == pkg)
        )
        print(f"{pkg:12s} {sum(v for (p, _), v in counts.items() if p == pkg):3d}  ({tiers})")
    return 0


def cmd_show(args) -> int:
    inst = _find(_instances(args), args.task)
    print(f"# {inst.instance_id}  ({inst.repo}, tier {inst.tier})\n")
    print(inst.problem_statement)
    print(f"\nFAIL_TO_PASS: {len(inst.FAIL_TO_PASS)}  PASS_TO_PASS: {len(inst.PASS_TO_PASS)}")
    for t in inst.FAIL_TO_PASS[:10]:
        print(f"  {t}")
    if args.gold:
        print("\n# gold patch\n" + inst.patch)
    return 0


def cmd_run(args) -> int:
    from practicum.envs.swe.grading import grade

    patch = read_patch(Path(args.patch))
    inst = _find(_instances(args), args.task)
    verdict = grade(inst, patch)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=1))
    else:
        print(
            f"{inst.instance_id}: {'RESOLVED' if verdict.resolved else 'UNRESOLVED'} "
            f"({verdict.reason}); patch applied: {verdict.patch_applied}; "
            f"FAIL_TO_PASS {verdict.fail_to_pass[0]}/{verdict.fail_to_pass[1]}, "
            f"PASS_TO_PASS {verdict.pass_to_pass[0]}/{verdict.pass_to_pass[1]}; "
            f"{verdict.seconds:.1f} s"
        )
        if verdict.dropped_files:
            print(f"dropped edits to: {', '.join(verdict.dropped_files)}")
        if not verdict.resolved:
            print("--- log tail ---\n" + verdict.log_tail[-1500:])
    return 0 if verdict.resolved else 1


def read_patch(path: Path) -> str:
    """The unified diff in `path` (an empty file: no change); a missing or non-UTF-8 file, or
    text with no diff header, is a PracticumError (grading text that is no diff would grade the
    unchanged code)."""
    from practicum.envs.swe.diffs import split_diff

    text = read_text_file(path, "patch file")
    if text.strip() and not split_diff(text):
        raise PracticumError(
            f"patch file {path} is not a patch: it has no 'diff --git' or "
            "'--- a/FILE' / '+++ b/FILE' header"
        )
    return text


def spread(instances: list[SweInstance], n: int | None) -> list[SweInstance]:
    """The first n tasks taken round-robin over packages (all of them when n is None)."""
    if n is None or n >= len(instances):
        return list(instances)
    by_pkg: dict[str, list[SweInstance]] = defaultdict(list)
    for inst in instances:
        by_pkg[package_of(inst)].append(inst)
    out: list[SweInstance] = []
    while len(out) < n:
        for lst in by_pkg.values():
            if lst and len(out) < n:
                out.append(lst.pop(0))
    return out


def cmd_check(args) -> int:
    from practicum.envs.swe.grading import grade

    instances = _instances(args)
    if args.package:
        instances = [i for i in instances if package_of(i) in args.package]
    chosen = spread(instances, args.tasks)
    console = Console(stderr=True)
    failures, rows = [], []
    start = time.monotonic()
    with _progress(console) as progress:
        bar = progress.add_task("gold check", total=len(chosen), info="")
        for inst in chosen:
            gold = grade(inst, inst.patch)
            empty = grade(inst, "")
            ok = gold.resolved and not empty.resolved
            rows.append(
                {
                    "task": inst.instance_id,
                    "package": package_of(inst),
                    "tier": inst.tier,
                    "f2p": len(inst.FAIL_TO_PASS),
                    "p2p": len(inst.PASS_TO_PASS),
                    "gold_resolved": gold.resolved,
                    "gold_reason": gold.reason,
                    "empty_resolved": empty.resolved,
                    "gold_seconds": gold.seconds,
                    "empty_seconds": empty.seconds,
                }
            )
            if not ok:
                failures.append(
                    f"{inst.instance_id}: gold {gold.reason}; empty "
                    f"{'RESOLVED' if empty.resolved else empty.reason}"
                )
            progress.update(bar, advance=1, info=f"{len(failures)} failed")
    seconds = time.monotonic() - start
    summary = {
        "tasks": len(chosen),
        "gold_resolved": sum(r["gold_resolved"] for r in rows),
        "empty_resolved": sum(r["empty_resolved"] for r in rows),
        "failures": failures,
        "seconds": round(seconds, 1),
    }
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "tasks": rows}, indent=1))
    print(
        f"{summary['tasks']} tasks: gold resolves {summary['gold_resolved']}, empty patch "
        f"resolves {summary['empty_resolved']}; {seconds:.0f} s"
    )
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


def cmd_synthesize(args) -> int:
    from practicum.envs.swe.synthesis.packages import resolve, scratch
    from practicum.envs.swe.synthesis.pipeline import Options, synthesize_package, write_suite

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = Options(
        max_tried=args.max_tried,
        max_kept=args.max_kept,
        seed=args.seed,
        per_function=args.per_function,
    )
    complete = None
    if args.issue_model:
        from practicum.engine.service import ModelService

        client = ModelService().client(args.issue_model)
        if client is not None:
            complete = lambda messages: client.complete(messages).text  # noqa: E731
    console = Console(stderr=True)
    records, yields = [], []
    work = scratch()
    try:
        with _progress(console) as progress:
            for spec in args.packages:
                pkg = resolve(spec, work)
                bar = progress.add_task(pkg.name, total=options.max_tried, info="")
                kept = Counter()

                def step(what, bar=bar, kept=kept):
                    kept[what] += 1
                    progress.update(bar, advance=1, info=f"kept {kept['kept']}")

                recs, y = synthesize_package(
                    pkg, out, work, options, on_step=step, complete=complete
                )
                progress.update(bar, total=y.tried, completed=y.tried)
                records.extend(recs)
                yields.append(y)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write_suite(records, yields, out)
    table = Table(title=f"synthesis yield -> {path}")
    for col in ("package", "baseline passed", "candidates", "tried", "kept", "rejected", "s"):
        table.add_column(col)
    for y in yields:
        table.add_row(
            y.package,
            str(y.baseline_passed),
            str(y.candidates),
            str(y.tried),
            str(y.kept),
            ", ".join(f"{k} {v}" for k, v in sorted(y.rejected.items())),
            f"{y.seconds:.0f}",
        )
    Console().print(table)
    return 0 if records else 1


def add_swe_commands(sub: argparse._SubParsersAction) -> None:
    """Add list, show, run, check and synthesize to the `swe` subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--instances",
        type=Path,
        metavar="FILE",
        help="SWE-bench-format JSONL (default: the bundled suite)",
    )

    p = sub.add_parser("list", parents=[common], help="list the tasks")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", parents=[common], help="show a task's issue and tests")
    p.add_argument("task")
    p.add_argument("--gold", action="store_true", help="also print the gold patch")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("run", parents=[common], help="grade a patch on a task (FULL rule)")
    p.add_argument("task")
    p.add_argument("patch", metavar="PATCH_FILE")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "check",
        parents=[common],
        help="gold-patch check: every gold patch resolves, the empty one none",
    )
    p.add_argument("--tasks", type=int, metavar="N", help="check N tasks spread over packages")
    p.add_argument(
        "--package", action="append", metavar="NAME", help="only this package's tasks (repeatable)"
    )
    p.add_argument("--json", metavar="FILE", help="write the per-task results here")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("synthesize", help="make tasks by mutating packages (SWE-smith style)")
    p.add_argument(
        "packages",
        nargs="+",
        metavar="PACKAGE",
        help="a bundled source name (inflection, toolz, semver, parse, boltons) or "
        "the path of an sdist or folder",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="writes instances.jsonl, yield.json and sources/ here",
    )
    p.add_argument("--max-tried", type=int, default=40, help="mutants tested per package")
    p.add_argument("--max-kept", type=int, default=16, help="tasks kept per package")
    p.add_argument("--per-function", type=int, default=2, help="kept tasks per function, at most")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--issue-model",
        metavar="SPEC",
        help="model service spec (e.g. "
        "local:<model>) that writes the issue texts; default: templates",
    )
    p.set_defaults(func=cmd_synthesize)


def add_arguments(parser: argparse.ArgumentParser, host: CommandHost) -> None:
    """list, show, run, check and synthesize on the `swe` parser."""
    add_swe_commands(parser.add_subparsers(dest="swe_command", required=True))


register_command(
    "swe", "SWE tasks: list, show, run (grade a patch), check, synthesize", add_arguments
)
