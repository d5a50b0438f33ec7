"""`practicum show RUN [--episode N]`: one stored episode as a person wants to read it.

Generic: any environment's episode from the run's episode store (RUN/episodes.jsonl): task,
reward, verdict, metrics, then every turn (the policy's action, the environment's answer, its
info). A flow episode (turns carrying `info["flow"]`) is rendered by role: query analysis,
planner (context, sub-goal, tool), executor command, tool result, verifier verdict, then the
generator's answer against the gold and the final memory. Printed with rich in the terminal
and saved as an HTML page, RUN/show/episode_<N>.html.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from practicum.episode import Episode
from practicum.errors import PracticumError


def load_episode(run_dir: Path, index: int | None) -> tuple[int, Episode]:
    """Episode `index` of the run's store (negative counts from the end; None = the last)."""
    path = Path(run_dir) / "episodes.jsonl"
    if not path.exists():
        raise PracticumError(f"{run_dir} has no episodes.jsonl (not a run folder?)")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if not lines:
        raise PracticumError(f"{path} holds no episode yet")
    i = len(lines) - 1 if index is None else index
    if not -len(lines) <= i < len(lines):
        raise PracticumError(f"--episode {index}: the run has episodes 0..{len(lines) - 1}")
    i %= len(lines)
    try:
        return i, Episode.from_json(lines[i])
    except ValueError as e:  # a line cut mid-write by a crash
        raise PracticumError(f"episode {i} of {path} is unreadable: {e}") from None


def _header(i: int, e: Episode) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    verdict = {True: "[green]solved[/]", False: "[red]not solved[/]", None: "-"}[e.solved]
    t.add_row("episode", f"{i}  ({e.episode_id})")
    t.add_row("task", f"{e.task_id}   group {e.group_id}")
    t.add_row(
        "reward",
        f"{e.reward:.3f}   {verdict}"
        + ("   [yellow]truncated[/]" if e.truncated else "")
        + (f"   [red]failure: {e.failure}[/]" if e.failure else ""),
    )
    if e.metrics:
        t.add_row("metrics", ", ".join(f"{k}={v:.3g}" for k, v in sorted(e.metrics.items())))
    return t


def _generic_turn(k: int, turn) -> Panel:
    parts = [Text("action", style="bold cyan"), Text(turn.action_text)]
    if turn.observation_text:
        parts += [Text("observation", style="bold magenta"), Text(turn.observation_text)]
    extra = {key: v for key, v in turn.info.items() if key != "flow"}
    if extra:
        parts.append(Text(f"info: {extra}", style="dim"))
    return Panel(Group(*parts), title=_turn_title(k, turn), title_align="left")


def _turn_title(k: int, turn) -> str:
    flags = " malformed" if turn.malformed else ""
    flags += f" cut ({turn.finish_reason})" if turn.cut else ""
    return f"turn {k}  (policy v{turn.policy_version}, reward {turn.reward:g}){flags}"


def _flow_turn(k: int, turn) -> Panel:
    f = turn.info["flow"]
    plan = f.get("plan", {})
    rows = Table.grid(padding=(0, 1))
    rows.add_column(style="bold", no_wrap=True)
    rows.add_column()
    if "query" in f:
        rows.add_row("query", f["query"])
        rows.add_row("analysis", f.get("analysis") or "(none)")
    rows.add_row("[cyan]planner[/]", Text(turn.action_text))
    if plan.get("malformed"):
        rows.add_row("", f"[red]malformed: {plan.get('reason')}[/]")
    else:
        rows.add_row("", f"sub-goal: {plan.get('sub_goal')}   tool: [bold]{plan.get('tool')}[/]")
    rows.add_row("[yellow]executor[/]", Text(f.get("command") or "-"))
    style = "red" if f.get("error") else "green"
    rows.add_row("[magenta]result[/]", Text(f.get("result", ""), style=style))
    if "verdict" in f:
        rows.add_row("[blue]verifier[/]", f"{f['verdict']}   ({f.get('verifier', '').strip()})")
    if "answer" in f:
        mark = "[green]correct[/]" if f.get("correct") else "[red]wrong[/]"
        rows.add_row("[bold]generator[/]", Text(f.get("generator", "").strip()))
        rows.add_row(
            "answer",
            f"{f['answer']!r}  vs gold {f.get('gold')!r}  {mark}"
            f"  (stopped by {f.get('stopped_by')})",
        )
    return Panel(rows, title=_turn_title(k, turn), title_align="left")


def render(i: int, e: Episode) -> list:
    items: list = [Panel(_header(i, e), title="episode", title_align="left")]
    for k, turn in enumerate(e.turns):
        items.append(_flow_turn(k, turn) if "flow" in turn.info else _generic_turn(k, turn))
    memory = next(
        (
            t.info["flow"].get("memory")
            for t in reversed(e.turns)
            if "flow" in t.info and t.info["flow"].get("memory")
        ),
        None,
    )
    if memory:
        items.append(Panel(Text(memory), title="final memory", title_align="left"))
    return items


def show(run_dir: str | Path, episode: int | None = None, console: Console | None = None) -> Path:
    """Print episode `episode` of the run and save it as HTML; returns the HTML path."""
    i, e = load_episode(Path(run_dir), episode)
    rec = Console(record=True, width=110, file=open("/dev/null", "w"))
    out = console or Console()
    for item in render(i, e):
        out.print(item)
        rec.print(item)
    html = Path(run_dir) / "show" / f"episode_{i}.html"
    html.parent.mkdir(exist_ok=True)
    rec.save_html(str(html))
    out.print(f"[dim]saved {html}[/]")
    return html
