"""The duration bias of asynchronous RL, reproduced with real concurrent actors and real sleeps.

A tabular softmax policy on the timed bandit, trained by the practicum.algo pieces on runs in
completion order (see practicum.runtime.duration_bias for the mechanism). Conditions, each with
and without duration-aware weights, over several seeds:

  paper case       time_slice allocation, reward as advantage: fast 0.3 @ 0.1 s vs slow 1.0 @ 1 s
  free actors      per_action allocation (what the async runtime does), same estimator
  complete groups  per_action, GRPO over complete groups of 4 (the async runtime's batch unit)
  3 arms, batch    time_slice, advantage centred on the consumed batch; arms fast-ok 0.6 @ 0.1 s,
                   slow 1.0 @ 1 s, fast-bad 0.0 @ 0.1 s

Writes benchmarks/results/duration_bias.{json,png}: P(best arm) per learner step (mean over
seeds, thin lines per seed) and the final values.

    python benchmarks/duration_bias.py [--seeds 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from practicum.envs.timed_bandit import Arm  # noqa: E402
from practicum.runtime.duration_bias import BiasConfig, run_bias_experiment  # noqa: E402

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS = Path(__file__).parent / "results"
THREE_ARMS = (Arm("fast_ok", 0.6, 0.1), Arm("slow", 1.0, 1.0), Arm("fast_bad", 0.0, 0.1))
CONDITIONS = {
    "paper case (time slices, reward as advantage)": dict(allocation="time_slice"),
    "free-running actors (fresh arm per run)": dict(allocation="per_action"),
    "complete GRPO groups (async runtime)": dict(allocation="per_action", estimator="groups"),
    "3 arms, batch-centred advantage": dict(allocation="time_slice", estimator="batch_grpo",
                                            arms=THREE_ARMS),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--time-scale", type=float, default=0.05)
    args = p.parse_args()
    state = machine_state()
    results: dict = {}
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True)
    for ax, (name, kw) in zip(axes.flat, CONDITIONS.items()):
        results[name] = {}
        for weighted, colour in ((False, "tab:red"), (True, "tab:blue")):
            curves, finals = [], []
            for seed in range(args.seeds):
                cfg = BiasConfig(duration_weights=weighted, steps=args.steps, batch=32, lr=1.0,
                                 time_scale=args.time_scale, seed=seed, **kw)
                r = run_bias_experiment(cfg)
                best = [a.name for a in cfg.arms].index("slow")
                curve = [row[best] for row in r.probs]
                curves.append(curve)
                finals.append(curve[-1])
                ax.plot(curve, color=colour, alpha=0.25, lw=0.8)
                print(f"{name:48} weights={weighted!s:5} seed={seed} P(slow)={curve[-1]:.3f} "
                      f"runs={r.completions} staleness={r.staleness_mean:.2f}", flush=True)
            mean = [sum(c[i] for c in curves) / len(curves) for i in range(len(curves[0]))]
            label = "duration weights" if weighted else "no weights"
            ax.plot(mean, color=colour, lw=2, label=f"{label}: final {sum(finals)/len(finals):.2f}")
            results[name]["weights" if weighted else "no_weights"] = {
                "final_p_slow": finals, "mean_final_p_slow": sum(finals) / len(finals)}
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("learner step")
        ax.set_ylabel("P(slow, best arm)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center right")
    fig.suptitle("Duration bias in asynchronous RL (real threads, real sleeps; arXiv 2509.01684)")
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / "duration_bias.png", dpi=110)
    (RESULTS / "duration_bias.json").write_text(json.dumps({"args": vars(args), "machine": state, **results},
                                                           indent=1))
    print(f"wrote {RESULTS / 'duration_bias.png'} and .json")


if __name__ == "__main__":
    main()
