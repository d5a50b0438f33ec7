"""The PPO update per rollout batch: clip fraction and approx KL of every optimizer update.

Each arm trains SmolLM2-135M-Instruct (LoRA) on the calculator task from the same start with the
same seed, sync runtime, and differs only in the update: train.mini_batches = 1 (one update per
batch: the ratio is exactly 1, nothing can clip), 2 and 4 (the proximal log-probs are computed
once, so from the second update on the ratio moves and DAPO's clip-higher binds), and 4 with a
symmetric clip (clip_high = clip_low = 0.2) to show clip-higher changing what is clipped.

Prints, per arm, the mean over steps of the clip fraction and approx KL(pi_prox || pi) of
update k = 1..n, and writes benchmarks/results/ppo_updates.{json,png}.

    python benchmarks/ppo_updates.py [--steps 3] [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)
from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).parent / "results"
ARMS = {
    "1 update": ["train.mini_batches=1"],
    "2 updates": ["train.mini_batches=2"],
    "4 updates": ["train.mini_batches=4"],
    "4 updates, symmetric clip 0.2": ["train.mini_batches=4", "algo.clip_high=0.2"],
}


def run_arm(args, name: str, extra: list[str], out: Path) -> dict:
    from practicum.config import load_config
    from practicum.report import read_metrics
    from practicum.runtime.train import run_training

    cfg = load_config(
        None,
        [
            f"model.model={args.model}",
            f"train.steps={args.steps}",
            "train.warmup_steps=0",
            "rollout.group_size=8",
            "rollout.tasks_per_step=2",
            "rollout.max_turns=2",
            "sampling.max_new_tokens=32",
            "eval.every=0",
            "eval.size=4",
            "train.checkpoint_every=1000",
            "algo.dynamic_sampling=false",
            f"run.seed={args.seed}",
            f"run.out_dir={out}",
            f"run.name={name.replace(' ', '_').replace(',', '')}",
            *extra,
        ],
    )
    summary = run_training(cfg, progress=True)
    rows = [r for r in read_metrics(cfg.run_dir) if "clip_frac_per_update" in r]
    clip = [r["clip_frac_per_update"] for r in rows]
    kl = [r["approx_kl_per_update"] for r in rows]
    n = len(clip[0])
    return {
        "arm": name,
        "overrides": extra,
        "steps": len(rows),
        "clip_frac_per_step": clip,
        "approx_kl_per_step": kl,
        "clip_frac_by_update": [sum(c[k] for c in clip) / len(clip) for k in range(n)],
        "approx_kl_by_update": [sum(x[k] for x in kl) / len(kl) for k in range(n)],
        "reward_mean_by_step": [r["reward_mean"] for r in rows],
        "learner_seconds_mean": sum(r["learner_seconds"] for r in rows) / len(rows),
        "wall_seconds": summary["wall_seconds"],
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for r in results:
        xs = range(1, len(r["clip_frac_by_update"]) + 1)
        axes[0].plot(xs, r["clip_frac_by_update"], "o-", label=r["arm"])
        axes[1].plot(xs, r["approx_kl_by_update"], "o-", label=r["arm"])
    axes[0].set_title("clip fraction of update k (mean over steps)")
    axes[1].set_title("approx KL(pi_prox || pi) of update k")
    for ax in axes:
        ax.set_xlabel("update within the step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    state = machine_state()
    with tempfile.TemporaryDirectory(prefix="ppo-updates-") as tmp:
        results = [run_arm(args, name, extra, Path(tmp)) for name, extra in ARMS.items()]
    table = Table(title="PPO updates per rollout batch (mean over steps)")
    for col in ("arm", "update", "clip fraction", "approx KL", "learner s/step"):
        table.add_column(col, justify="right" if col != "arm" else "left")
    for r in results:
        for k, (c, kl) in enumerate(zip(r["clip_frac_by_update"], r["approx_kl_by_update"]), 1):
            table.add_row(
                r["arm"] if k == 1 else "",
                str(k),
                f"{c:.4f}",
                f"{kl:.2e}",
                f"{r['learner_seconds_mean']:.1f}" if k == 1 else "",
            )
    Console().print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ppo_updates.json").write_text(
        json.dumps({"args": vars(args), "machine": state, "arms": results}, indent=1)
    )
    plot(results, RESULTS / "ppo_updates.png")
    print(f"wrote {RESULTS / 'ppo_updates.json'} and {RESULTS / 'ppo_updates.png'}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
