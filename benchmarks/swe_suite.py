"""The bundled SWE suite: synthesis yield per package and the gold-patch check, timed.

    .venv/bin/python benchmarks/swe_suite.py

Grades every task's gold patch (must resolve) and the empty patch (must not), records grading
seconds per task and per package, joins the synthesis yield (`tasks/swe/yield.json`), prints a
table and writes benchmarks/results/swe_suite.json. Exit code 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

from practicum.envs.swe.cli import package_of, spread
from practicum.envs.swe.grading import grade
from practicum.envs.swe.instance import load_instances
from practicum.tasks.swe import HERE, bundled_instances_path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tasks", type=int, help="only N tasks spread over packages")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "swe_suite.json"))
    p.add_argument(
        "--from-check",
        metavar="FILE",
        help="tabulate the JSON written by "
        "`practicum swe check --json FILE` instead of grading again",
    )
    args = p.parse_args()
    state = machine_state()
    instances = spread(load_instances(bundled_instances_path()), args.tasks)
    rows, start = [], time.monotonic()
    if args.from_check:
        check = json.loads(Path(args.from_check).read_text())
        rows, instances = check["tasks"], []
        state = {**state, "note": "timings from `practicum swe check`", **check.get("machine", {})}
    for n, inst in enumerate(instances, 1):
        gold, empty = grade(inst, inst.patch), grade(inst, "")
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
        print(
            f"[{n}/{len(instances)}] {inst.instance_id}: gold {gold.reason}, empty "
            f"{'RESOLVED' if empty.resolved else 'unresolved'} ({gold.seconds:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
    total = check["summary"]["seconds"] if args.from_check else time.monotonic() - start
    yields = {y["package"]: y for y in json.loads((HERE / "yield.json").read_text())}
    per = defaultdict(list)
    for r in rows:
        per[r["package"]].append(r)
    packages = {}
    print(
        f"{'package':11s} {'tried':>5s} {'kept':>4s} {'synth s':>7s} {'tasks':>5s} "
        f"{'tiers 1/2/3':>11s} {'gold ok':>7s} {'empty ok':>8s} {'grade s':>7s}"
    )
    for pkg, rs in per.items():
        y = yields.get(pkg, {})
        tiers = "/".join(str(sum(r["tier"] == t for r in rs)) for t in (1, 2, 3))
        packages[pkg] = {
            "tasks": len(rs),
            "tiers": tiers,
            "tried": y.get("tried"),
            "kept": y.get("kept"),
            "synthesis_seconds": y.get("seconds"),
            "gold_resolved": sum(r["gold_resolved"] for r in rs),
            "empty_unresolved": sum(not r["empty_resolved"] for r in rs),
            "grading_seconds_mean": round(statistics.mean(r["gold_seconds"] for r in rs), 2),
        }
        q = packages[pkg]
        print(
            f"{pkg:11s} {q['tried']!s:>5s} {q['kept']!s:>4s} {q['synthesis_seconds']!s:>7s} "
            f"{len(rs):5d} {tiers:>11s} {q['gold_resolved']:7d} {q['empty_unresolved']:8d} "
            f"{q['grading_seconds_mean']:7.2f}"
        )
    failures = [r for r in rows if not r["gold_resolved"] or r["empty_resolved"]]
    print(f"{len(rows)} tasks, {len(failures)} failing the check, {total:.0f} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": state,
                "seconds": round(total, 1),
                "failures": [r["task"] for r in failures],
                "packages": packages,
                "tasks": rows,
            },
            indent=1,
        )
        + "\n"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    sys.exit(main())
