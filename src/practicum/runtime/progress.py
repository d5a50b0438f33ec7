"""A rich progress bar for training that shows the latest reward and loss."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn


class TrainProgress:
    def __init__(self, total: int, start: int = 0, enabled: bool = True, label: str = "train"):
        self.enabled = enabled
        self._progress = Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), TextColumn("{task.fields[info]}"), disable=not enabled)
        self._task = self._progress.add_task("train", total=total, completed=start, info="")

    def __enter__(self) -> "TrainProgress":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def note(self, message: str) -> None:
        """A line above the bar (or on stderr when the bar is off)."""
        if self.enabled:
            self._progress.console.print(f"[yellow]{message}")

    def update(self, step: int, metrics: dict) -> None:
        info = f"reward {metrics.get('reward_mean', float('nan')):.3f}"
        if "loss" in metrics:
            info += f"  loss {metrics['loss']:+.4f}"
        if "eval/reward_mean" in metrics:
            info += f"  eval {metrics['eval/reward_mean']:.3f}"
        self._progress.update(self._task, completed=step, info=info)
