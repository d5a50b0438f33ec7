"""Ablation of the ML-engineering recipe (arXiv 2509.01684, Sec. 4): partial credit x duration
weights, several seeds, on the bundled suite with SmolLM2-135M-Instruct in template mode.

    .venv/bin/python benchmarks/mle_ablation.py                 # small default budget
    .venv/bin/python benchmarks/mle_ablation.py --steps 20 --group-size 8 --eval-repeats 8
    .venv/bin/python benchmarks/mle_ablation.py --config configs/mle_section.yaml  # section mode

Four arms, each trained from the same untrained policy per seed (sync runtime, so runs are
seeded and comparable): partial credit on/off (milestones worth +0.1 or nothing) and duration
weights on/off (each action's loss weighted by dt / mean_batch(dt)). For arm (a) of issue 9
use section mode (`configs/mle_section.yaml`): the untrained model fails most attempts there,
at different depths, so milestones rank its failures. After training, every arm is evaluated
with the SAME reward (partial credit on) on the held-out competitions, so the numbers compare
across arms; the untrained policy is evaluated once per seed as the baseline.
Prints mean +- std over seeds and writes benchmarks/results/mle_ablation.{json,png}.

The default budget (2 steps of 1 task x 4 episodes, 6 held-out episodes per evaluation) runs
in ~15 minutes on 2 cores (3 steps and 9 held-out episodes took 22.6 minutes on a shared
machine) and is far too small to separate the arms: it checks that the pipeline runs and shows
the noise level. Pass larger --steps/--group-size/--tasks-per-step
(the main job uses 10 x 2 x 8) for real comparisons.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
ARMS = [(True, True), (True, False), (False, True), (False, False)]
"""(partial credit, duration weights)."""


def arm_name(partial: bool, duration: bool) -> str:
    return f"{'partial' if partial else 'no-partial'} / {'duration' if duration else 'no-duration'}"


def overrides(args, seed: int, partial: bool, duration: bool, out_dir: str) -> list[str]:
    return [
        f"run.out_dir={out_dir}", f"run.name=s{seed}_pc{int(partial)}_dw{int(duration)}",
        "run.resume=false", f"run.seed={seed}", f"train.steps={args.steps}",
        f"rollout.group_size={args.group_size}", f"rollout.tasks_per_step={args.tasks_per_step}",
        "runtime.mode=sync", "eval.every=0", "eval.size=1", f"train.lr={args.lr}",
        f"task.options.partial_credit={str(partial).lower()}",
        f"algo.duration_weights={str(duration).lower()}",
        f"task.options.eval_repeats={args.eval_repeats}", "train.checkpoint_every=1000",
    ]


def held_out_eval(session, cfg) -> dict[str, float]:
    """Held-out reward (partial credit ON for every arm) and valid-submission rate."""
    from practicum.envs.registry import SuiteContext, build_suite
    from practicum.runtime.rollout import EpisodeBuilder, rollout_batch

    options = {**cfg.task.options, "partial_credit": True}
    suite = build_suite("mle", options, SuiteContext(cfg.run.seed, cfg.rollout.failure_reward))
    params = session.sampling(cfg.eval.temperature)
    builders = [EpisodeBuilder(suite.make_env(session.models), t, f"ablation-eval/{t.task_id}",
                               0, session.chat, session.limits, params, cfg.run.seed)
                for t in suite.eval_tasks]
    eps = rollout_batch(session.server, builders, cfg.rollout.env_workers)
    valid = [bool(e.metrics.get("valid")) for e in eps]
    return {"reward_mean": statistics.fmean(e.reward for e in eps),
            "valid_rate": sum(valid) / len(valid), "episodes": len(eps)}


def run_arm(args, seed: int, partial: bool, duration: bool, out_dir: str,
            baseline: dict | None) -> tuple[dict, dict]:
    from practicum.config import load_config
    from practicum.runtime.loop import train
    from practicum.runtime.session import open_session
    from practicum.runtime.sync import SyncBatches

    cfg = load_config(args.config, overrides(args, seed, partial, duration, out_dir))
    started = time.perf_counter()
    session = open_session(cfg)
    try:
        if baseline is None:
            baseline = held_out_eval(session, cfg)
        summary = train(session, SyncBatches(session), progress=False)
        after = held_out_eval(session, cfg)
    finally:
        session.close()
    train_rewards = [json.loads(line).get("reward_mean") for line in
                     (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"seed": seed, "partial_credit": partial, "duration_weights": duration,
            "before": baseline, "after": after,
            "train_reward": [r for r in train_rewards if r is not None],
            "steps": summary["steps"], "seconds": time.perf_counter() - started}, baseline


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def table(records: list[dict]) -> list[dict]:
    rows = []
    for partial, duration in ARMS:
        mine = [r for r in records if (r["partial_credit"], r["duration_weights"]) ==
                (partial, duration)]
        if not mine:
            continue
        row = {"arm": arm_name(partial, duration), "seeds": len(mine)}
        for key in ("reward_mean", "valid_rate"):
            row[f"after_{key}"] = mean_std([r["after"][key] for r in mine])
            row[f"gain_{key}"] = mean_std([r["after"][key] - r["before"][key] for r in mine])
        rows.append(row)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["arm"].replace(" / ", "\n") for r in rows]
    for ax, key, title in ((axes[0], "gain_reward_mean", "held-out reward gain"),
                           (axes[1], "gain_valid_rate", "held-out valid-rate gain")):
        means = [r[key][0] for r in rows]
        stds = [r[key][1] for r in rows]
        ax.bar(names, means, yerr=stds, capsize=4, color=["C0", "C1", "C2", "C3"][:len(rows)])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(f"{title} (after - before), mean +- std")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "mle.yaml"))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tasks-per-step", type=int, default=1)
    p.add_argument("--eval-repeats", type=int, default=2, help="episodes per held-out task")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    state = machine_state()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mle-ablation-") as runs:
        for seed in range(args.seeds):
            baseline = None
            for partial, duration in ARMS:
                record, baseline = run_arm(args, seed, partial, duration, runs, baseline)
                records.append(record)
                print(f"seed {seed} {arm_name(partial, duration):28s} held-out reward "
                      f"{record['before']['reward_mean']:+.2f} -> {record['after']['reward_mean']:+.2f}"
                      f", valid {record['before']['valid_rate']:.2f} -> "
                      f"{record['after']['valid_rate']:.2f} ({record['seconds']:.0f} s)", flush=True)
    rows = table(records)
    print(f"\n{'arm':28s} {'held-out reward':>18s} {'gain':>16s} {'valid rate':>14s} {'gain':>14s}")
    for r in rows:
        print(f"{r['arm']:28s} {r['after_reward_mean'][0]:+8.2f} +- {r['after_reward_mean'][1]:4.2f}"
              f" {r['gain_reward_mean'][0]:+7.2f} +- {r['gain_reward_mean'][1]:4.2f}"
              f" {r['after_valid_rate'][0]:7.2f} +- {r['after_valid_rate'][1]:.2f}"
              f" {r['gain_valid_rate'][0]:+6.2f} +- {r['gain_valid_rate'][1]:.2f}")
    total = time.perf_counter() - started
    print(f"\n{len(records)} runs in {total / 60:.1f} min")
    (out / "mle_ablation.json").write_text(json.dumps(
        {"args": vars(args), "machine": state, "seconds": total, "table": rows, "runs": records}, indent=1))
    plot(rows, out / "mle_ablation.png")
    print(f"wrote {out / 'mle_ablation.json'} and {out / 'mle_ablation.png'}")


if __name__ == "__main__":
    main()
