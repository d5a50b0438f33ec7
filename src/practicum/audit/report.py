"""The audit's table (rich) and its JSON."""

from __future__ import annotations

import json
from pathlib import Path

from practicum.audit.run import OK_VERDICTS, AuditReport


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def audit_table(report: AuditReport):
    from rich.table import Table

    table = Table(
        title=f"practicum audit {report.env}: {len(report.tasks)} tasks, floor "
        f"{_num(report.floor)}, honest reference {_num(report.honest)}, "
        f"{report.seconds:.0f} s"
    )
    for col, justify in (
        ("attack", "left"),
        ("ceiling", "left"),
        ("tasks", "right"),
        ("mean", "right"),
        ("max", "right"),
        ("honest ref", "right"),
        ("verdict", "left"),
    ):
        table.add_column(col, justify=justify)
    for r in report.results:
        verdict = r.verdict
        detail = (r.unmet + r.crashes + r.leftovers)[:2]
        if detail:
            verdict += ": " + "; ".join(detail)
        style = (
            None
            if r.verdict in OK_VERDICTS[:2]
            else "yellow"
            if r.verdict in OK_VERDICTS
            else "bold red"
        )
        table.add_row(
            r.attack,
            r.ceiling,
            str(len(r.rewards) + len(r.crashes)),
            _num(r.mean),
            _num(r.max),
            _num(report.honest),
            verdict,
            style=style,
        )
    return table


def write_json(reports: list[AuditReport], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_dict() for r in reports], indent=1) + "\n")
