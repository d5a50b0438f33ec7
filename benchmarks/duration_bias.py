"""The duration bias of asynchronous RL and duration-aware weights (arXiv 2509.01684), measured
with real concurrent actors and real sleeps in both batching modes of the runtime.

A tabular softmax policy on a timed bandit, trained with the practicum.algo pieces (mechanism,
simulation and mean-field model in benchmarks/bandit_sim.py). One panel per condition, each
run with and without duration weights over several seeds:

  arms       paper:     fast 0.3 @ 0.1 s, slow 1.0 @ 1 s                  (the slow arm is best)
             fast-best: fast_good 1.0 @ 0.1 s, slow_ok 0.8 @ 1 s, fast_bad 0.0 @ 0.1 s
  batching   groups (complete GRPO groups, scale_by_std=True unless "no std") or streaming
             (first N episodes to finish, per-task running baseline); "A = R" is the
             reward-as-advantage reference of the paper's argument
  allocation per_action (a fresh arm per episode: the runtime) or time_slice (an actor keeps
             re-running its arm for a slice of wall time: the paper's premise)

Prints a table (final P(best arm) mean +- std over seeds, the mean-field prediction, the best
arm's share of consumed runs, staleness in versions, wall seconds per run) and writes
benchmarks/results/duration_bias.{json,png}.

    python benchmarks/duration_bias.py [--seeds 3] [--steps 60] [--time-scale 0.05]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)
from bandit_sim import FAST_BEST_ARMS, PAPER_ARMS, BiasConfig, mean_field_curve, run_bias_experiment  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ARMS = {"paper": PAPER_ARMS, "fast-best": FAST_BEST_ARMS}
CONDITIONS = [  # (arms, batching, allocation, advantage label, extra config)
    ("paper", "groups", "per_action", "grpo", {}),
    ("paper", "groups", "time_slice", "grpo", {}),
    ("paper", "streaming", "per_action", "task baseline", {}),
    ("paper", "streaming", "time_slice", "task baseline", {}),
    ("paper", "streaming", "time_slice", "A = R", {"advantage": "reward"}),
    ("fast-best", "groups", "per_action", "grpo", {}),
    ("fast-best", "groups", "per_action", "grpo, no std", {"scale_by_std": False}),
    ("fast-best", "groups", "time_slice", "grpo", {}),
    ("fast-best", "streaming", "per_action", "task baseline", {}),
    ("fast-best", "streaming", "time_slice", "task baseline", {}),
]


def run_condition(
    arms: str, batching: str, allocation: str, weighted: bool, extra: dict, args
) -> dict:
    runs, cfg = [], None
    for seed in range(args.seeds):
        cfg = BiasConfig(
            arms=ARMS[arms],
            batching=batching,
            allocation=allocation,
            duration_weights=weighted,
            steps=args.steps,
            time_scale=args.time_scale,
            seed=seed,
            **extra,
        )
        runs.append(run_bias_experiment(cfg))
    finals = [r.best_curve()[-1] for r in runs]
    best = cfg.arms[cfg.best].name
    consumed = {a.name: sum(r.completions[a.name] for r in runs) for a in cfg.arms}
    return {
        "final_p_best": finals,
        "mean": statistics.fmean(finals),
        "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
        "mean_field": mean_field_curve(cfg),
        "curves": [r.best_curve() for r in runs],
        "consumed": consumed,
        "share_best": consumed[best] / sum(consumed.values()),
        "staleness_mean": statistics.fmean(r.staleness_mean for r in runs),
        "wall_seconds": [r.wall_seconds for r in runs],
    }


def print_table(rows: list[dict]) -> None:
    table = Table(title="Duration bias: final P(best arm) over seeds (real threads, real sleeps)")
    for col in (
        "arms",
        "batching",
        "allocation",
        "advantage",
        "weights",
        "P(best) final",
        "mean field",
        "best share",
        "staleness",
        "wall s",
    ):
        table.add_column(
            col,
            justify="left" if col in ("arms", "batching", "allocation", "advantage") else "right",
        )
    for r in rows:
        table.add_row(
            r["arms"],
            r["batching"],
            r["allocation"],
            r["advantage"],
            "on" if r["weights"] else "off",
            f"{r['mean']:.3f} ± {r['std']:.3f}",
            f"{r['mean_field'][-1]:.3f}",
            f"{r['share_best']:.2f}",
            f"{r['staleness_mean']:.2f}",
            f"{statistics.fmean(r['wall_seconds']):.1f}",
        )
    Console(width=160).print(table)


def plot(rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(2, 5, figsize=(20, 7.5), sharey=True)
    for ax, cond in zip(axes.flat, CONDITIONS):
        arms, batching, allocation, label = cond[:4]
        for r in rows:
            if (r["arms"], r["batching"], r["allocation"], r["advantage"]) != cond[:4]:
                continue
            colour = "tab:blue" if r["weights"] else "tab:red"
            for curve in r["curves"]:
                ax.plot(curve, color=colour, alpha=0.25, lw=0.8)
            mean = [statistics.fmean(c[i] for c in r["curves"]) for i in range(len(r["curves"][0]))]
            name = "duration weights" if r["weights"] else "no weights"
            ax.plot(mean, color=colour, lw=2, label=f"{name}: {r['mean']:.2f}")
            ax.plot(r["mean_field"], color=colour, lw=1, ls="--")
        ax.set_title(f"{arms}: {batching}, {allocation}, {label}", fontsize=9)
        ax.set_xlabel("learner step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    for ax in axes[:, 0]:
        ax.set_ylabel("P(best arm)")
    fig.suptitle(
        "Duration bias in asynchronous RL (thin: seeds, thick: mean, dashed: mean field;"
        " arXiv 2509.01684)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60, help="learner steps per run")
    p.add_argument(
        "--time-scale",
        type=float,
        default=0.05,
        help="multiplies arm durations (0.05: slow arm ~50 ms)",
    )
    args = p.parse_args()
    state = machine_state()
    start = time.perf_counter()
    rows = []
    for arms, batching, allocation, label, extra in CONDITIONS:
        for weighted in (False, True):
            r = run_condition(arms, batching, allocation, weighted, extra, args)
            rows.append(
                {
                    "arms": arms,
                    "batching": batching,
                    "allocation": allocation,
                    "advantage": label,
                    "weights": weighted,
                    **r,
                }
            )
            print(
                f"{arms:9} {batching:9} {allocation:10} {label:13} weights={weighted!s:5} "
                f"P(best)={r['final_p_best']}",
                flush=True,
            )
    elapsed = time.perf_counter() - start
    print_table(rows)
    print(f"total {elapsed:.0f} s")
    RESULTS.mkdir(exist_ok=True)
    plot(rows, RESULTS / "duration_bias.png")
    (RESULTS / "duration_bias.json").write_text(
        json.dumps(
            {"args": vars(args), "machine": state, "elapsed_seconds": elapsed, "rows": rows},
            indent=1,
        )
    )
    print(f"wrote {RESULTS / 'duration_bias.png'} and .json")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
