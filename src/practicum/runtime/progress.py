"""A run's progress as people watch it: a rich bar on a terminal, plain lines elsewhere.

When stdout is a terminal the bar shows the latest reward and loss; when it is not (a file, as
under nohup, CI or a cluster scheduler) a bar would print nothing readable, so every step and
every evaluation prints one plain line instead:

    step 3/10  reward -4.210  solved 0.188  episodes 64  step 41.2 s  elapsed 3m05s  ETA 4m48s
    eval step 0 (before training)  reward -8.917  solved 0.083  valid 0.083  24 episodes  95.3 s

The same lines go to RUN/progress.log either way (appended: a resumed run continues it).

A stage counted in units (demonstrations, sampled episodes, evaluation episodes, audit
episodes) is a `Count`: its own bar on a terminal; elsewhere a line when it starts, at most one
every `LINE_EVERY` seconds and one when it ends, so a long stage is never silent:

    sft demos 12/40  elapsed 1m05s  ETA 2m32s
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from practicum.envs.base import HEADLINE

LOG_FILE = "progress.log"
LINE_EVERY = 10.0
"""Seconds between two plain lines of a `Count` (its first and last lines always print)."""


def duration(seconds: float) -> str:
    """1m05s, 2h03m, 42s."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def step_line(
    step: int,
    total: int,
    metrics: dict,
    episodes: int,
    elapsed: float,
    eta: float | None,
    label: str = "step",
) -> str:
    """One training step: reward, solved rate, loss, episodes so far, seconds, ETA (the fields
    `metrics` has)."""
    parts = [f"{label} {step}/{total}"]
    for key, name, fmt in (
        ("reward_mean", "reward", ".3f"),
        ("solved_rate", "solved", ".3f"),
        ("loss", "loss", "+.4f"),
    ):
        if key in metrics:
            parts.append(f"{name} {metrics[key]:{fmt}}")
    if episodes:
        parts.append(f"episodes {episodes}")
    if "step_seconds" in metrics:
        parts.append(f"step {metrics['step_seconds']:.1f} s")
    parts += [f"elapsed {duration(elapsed)}", f"ETA {duration(eta) if eta is not None else '?'}"]
    return "  ".join(parts)


def count_line(
    label: str, done: int, total: int, elapsed: float, eta: float | None, info: str = ""
) -> str:
    """Units of a counted stage done so far: `label done/total  [info]  elapsed  ETA`."""
    parts = [f"{label} {done}/{total}"] + ([info] if info else [])
    parts += [f"elapsed {duration(elapsed)}", f"ETA {duration(eta) if eta is not None else '?'}"]
    return "  ".join(parts)


def eval_line(step: int, result: dict, seconds: float, when: str = "") -> str:
    """One held-out evaluation: reward, solved rate, the environment's headline metrics,
    episodes, seconds."""
    parts = [
        f"eval step {step}" + (f" ({when})" if when else ""),
        f"reward {result.get('reward_mean', float('nan')):.3f}",
        f"solved {result.get('solved_rate', float('nan')):.3f}",
    ]
    shown = f"env/{HEADLINE}"  # the metrics the environment asks to show (envs.base)
    parts += [
        f"{k[len(shown) :]} {v:.3f}" for k, v in sorted(result.items()) if k.startswith(shown)
    ]
    parts += [f"{result.get('tasks', 0)} episodes", f"{seconds:.1f} s"]
    return "  ".join(parts)


class TrainProgress:
    def __init__(
        self,
        total: int,
        start: int = 0,
        enabled: bool = True,
        label: str = "train",
        log_dir: Path | None = None,
        stream: IO[str] | None = None,
    ):
        """enabled=False (--quiet): neither bar nor lines on stdout (the log file still gets
        them). `stream` (default stdout) decides bar or lines by whether it is a terminal."""
        self.total, self.start = total, start
        self.stream = stream or sys.stdout
        tty = self.stream.isatty()
        self.enabled = enabled and tty
        """The bar is on."""
        self.plain = enabled and not tty
        """Plain lines on the stream instead of the bar."""
        self.log_path = Path(log_dir) / LOG_FILE if log_dir is not None else None
        self.label = "step" if label == "train" else label
        self.started = self._last = time.monotonic()
        self._step_seconds: list[float] = []
        self._last_step = start
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            disable=not self.enabled,
        )
        self._task = self._progress.add_task(
            label, total=total, completed=start, info="", visible=total > 0
        )
        self._live = False

    def __enter__(self) -> "TrainProgress":
        self._progress.__enter__()
        self._live = True
        return self

    def __exit__(self, *exc) -> None:
        self._live = False
        self._progress.__exit__(*exc)

    def count(self, label: str, total: int, done: int = 0, every: float = LINE_EVERY) -> "Count":
        """A counted stage shown with this run's progress (module docstring)."""
        return Count(self, label, total, done, every)

    def _emit(self, line: str, style: str = "", above_bar: bool = True) -> None:
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {line}\n")
        if self.plain:
            print(line, file=self.stream, flush=True)
        elif self.enabled and above_bar:
            self._progress.console.print(f"[{style}]{line}" if style else line, highlight=False)

    def note(self, message: str) -> None:
        """A warning: a line above the bar, or a plain line."""
        self._emit(message, "yellow")

    def evaluation(self, step: int, result: dict, seconds: float, when: str = "") -> None:
        """A held-out evaluation finished (`when`: e.g. "before training")."""
        self._emit(eval_line(step, result, seconds, when), "cyan")

    def update(self, step: int, metrics: dict, episodes: int = 0) -> None:
        """Training step `step` finished; `episodes`: sampled so far in the run."""
        now = time.monotonic()
        done = max(1, step - self._last_step)  # an update may complete several units at once
        self._step_seconds.append(metrics.get("step_seconds", now - self._last) / done)
        self._last, self._last_step = now, step
        recent = self._step_seconds[-5:]  # the first steps include warm-up and refills
        eta = sum(recent) / len(recent) * max(0, self.total - step)
        self._emit(
            step_line(step, self.total, metrics, episodes, now - self.started, eta, self.label),
            above_bar=False,
        )
        if self.enabled:
            info = f"reward {metrics.get('reward_mean', float('nan')):.3f}"
            if "loss" in metrics:
                info += f"  loss {metrics['loss']:+.4f}"
            if "eval/reward_mean" in metrics:
                info += f"  eval {metrics['eval/reward_mean']:.3f}"
            self._progress.update(self._task, completed=step, info=info)


class Count:
    """`done/total` of one stage's units: a bar of its own (beside the run's, if that is shown)
    on a terminal, throttled plain lines elsewhere, every line in progress.log. Use as a
    context manager; `advance()` once per unit finished."""

    def __init__(
        self,
        parent: TrainProgress,
        label: str,
        total: int,
        done: int = 0,
        every: float = LINE_EVERY,
    ):
        self.parent, self.label, self.total, self.done = parent, label, total, done
        self.every = every
        self._first = done
        self._own = False
        self._task = None
        self.info = ""

    def __enter__(self) -> "Count":
        self._own = self.parent.enabled and not self.parent._live
        if self._own:  # a bar needs a live display: the parent's, or one for this stage
            self.parent.__enter__()
        self._task = self.parent._progress.add_task(
            self.label, total=self.total, completed=self.done, info=""
        )
        self.started = time.monotonic()
        self._last_line = -float("inf")
        self._line(force=True)
        return self

    def __exit__(self, *exc) -> None:
        self.parent._progress.remove_task(self._task)
        if self._own:
            self.parent.__exit__(*exc)

    def advance(self, n: int = 1, info: str = "") -> None:
        """`n` more units are done; `info` (e.g. "reward 0.250") goes on the bar and lines."""
        self.done += n
        self.info = info or self.info
        self.parent._progress.update(self._task, completed=self.done, info=self.info)
        self._line(force=self.done >= self.total)

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_line < self.every:
            return
        self._last_line = now
        elapsed, finished = now - self.started, self.done - self._first
        eta = elapsed / finished * (self.total - self.done) if finished else None
        self.parent._emit(
            count_line(self.label, self.done, self.total, elapsed, eta, self.info), above_bar=False
        )


def counting(
    label: str,
    total: int,
    done: int = 0,
    enabled: bool = True,
    log_dir: Path | None = None,
    stream: IO[str] | None = None,
    every: float = LINE_EVERY,
) -> Count:
    """A counted stage on its own (no training bar around it)."""
    return TrainProgress(0, enabled=enabled, label=label, log_dir=log_dir, stream=stream).count(
        label, total, done, every
    )
