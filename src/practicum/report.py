"""Metrics to disk (JSONL + TensorBoard), what a set of episodes amounts to, and plots people
would rather look at than read."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

from practicum.episode import Episode

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def episode_metrics(
    episodes: list[Episode], solved_reward: float = 1.0, prefix: str = ""
) -> dict[str, float]:
    """Means over episodes: reward, solved rate (the env's verdict, else reward >=
    `solved_reward`), turns, sampled tokens, malformed and length-cut turns, failures, overlong
    episodes, env seconds, and every metric the environments report (as `env/<name>`, averaged
    over the episodes that report it)."""
    n = max(1, len(episodes))
    turns = [t for e in episodes for t in e.turns]
    out = {
        "reward_mean": sum(e.reward for e in episodes) / n,
        "solved_rate": sum(solved(e, solved_reward) for e in episodes) / n,
        "turns_mean": len(turns) / n,
        "sampled_tokens_mean": sum(e.num_sampled for e in episodes) / n,
        "malformed_turn_rate": sum(t.malformed for t in turns) / max(1, len(turns)),
        "cut_turn_rate": sum(t.cut for t in turns) / max(1, len(turns)),
        "failures": float(sum(e.failure is not None for e in episodes)),
        "overlong": float(sum(e.overlong for e in episodes)),
        "env_seconds": sum(e.env_duration for e in episodes),
    }
    values: dict[str, list[float]] = {}
    for e in episodes:
        for k, v in e.metrics.items():
            if isinstance(v, (int, float)):  # bools count as 0/1
                values.setdefault(k, []).append(float(v))
    out.update({f"env/{k}": sum(v) / len(v) for k, v in sorted(values.items())})
    return {f"{prefix}{k}": v for k, v in out.items()}


def solved(e: Episode, threshold: float) -> bool:
    """The environment's verdict when it gives one, else: no failure and reward >= threshold."""
    return e.solved if e.solved is not None else e.failure is None and e.reward >= threshold


class MetricsLogger:
    """Appends one JSON object per step to metrics.jsonl and mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except Exception:  # tensorboard missing: JSONL is the record
                self._tb = None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **metrics}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    last: dict[int, dict] = {}  # a resumed run may re-log a step; keep the newest row per step
    for r in rows:
        last.setdefault(r["step"], {}).update(r)
    return [last[s] for s in sorted(last)]


def plot_rewards(
    run_dir: Path,
    out: Path | None = None,
    keys: tuple[str, ...] = ("reward_mean", "eval/reward_mean"),
) -> Path:
    """PNG of reward vs step: training batches (line) and held-out evaluations (markers)."""
    rows = read_metrics(run_dir)
    out = out or Path(run_dir) / "reward.png"
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in keys:
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            xs, ys = zip(*pts)
            style = "o-" if key.startswith("eval") else "-"
            ax.plot(xs, ys, style, label=key, alpha=0.9)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("mean reward")
    ax.set_title(f"practicum run: {Path(run_dir).name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
