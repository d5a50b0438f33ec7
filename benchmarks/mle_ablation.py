"""The ML-engineering recipe's ablations (arXiv 2509.01684, Sec. 4), reproduced in direction with
SmolLM2-135M-Instruct + LoRA on the bundled competitions, several seeds.

    .venv/bin/python benchmarks/mle_ablation.py --study partial --seeds 0 1 2
    .venv/bin/python benchmarks/mle_ablation.py --study duration --seeds 0 1 2
    .venv/bin/python benchmarks/mle_ablation.py --report      # table + plot from stored runs

Studies (each arm trained from the same untrained policy per seed, sync runtime, so runs are
seeded and comparable; every arm is then evaluated on the held-out competitions with the SAME
reward, partial credit on):
  partial   (a) partial credit on vs off, in section mode (configs/mle_section.yaml): the untrained
            model fails most attempts there, at different depths, so milestones are the only
            signal that ranks its failures. Without them every group is all failures and dynamic
            sampling filters it: the arm cannot learn (the paper's argument, Sec. 3.2).
  duration  (b) duration-aware weights on vs off, in template mode (configs/mle.yaml), where the
            one-line action picks the model and so the run time. The paper (Sec. 3.1) finds the
            unweighted policy drifts to fast, weak models (-3.85%). Reported per training step:
            mean action duration and score credit, beside the held-out result.
            (c) self-improvement at evaluation: every arm of this study is evaluated from scratch
            and as the best of (scratch, one improvement of it) (`mle evaluate`'s logic), and as
            the best of two scratch attempts: the same number of runs without the improvement
            prompt, so a gain from improvement is not just a second draw.

Each (study, seed, arm) is stored as OUT/runs/<study>_s<seed>_<arm>.json as soon as it finishes:
a killed benchmark resumes where it stopped, and seeds can run as parallel processes. Every
invocation rewrites the report from all stored runs: OUT/mle_ablation.{json,png}. The default
budget is small (a few steps of 2 tasks x 4 episodes): it shows the direction at the noise
level of a 2-core machine, not the paper's effect sizes.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Study:
    config: str
    arms: dict[str, dict[str, bool]]
    """arm name -> {"partial_credit": ..., "duration_weights": ...}."""
    improve_eval: bool


STUDIES = {
    "partial": Study(
        "configs/mle_section.yaml",
        {
            "partial credit": {"partial_credit": True, "duration_weights": True},
            "no partial credit": {"partial_credit": False, "duration_weights": True},
        },
        False,
    ),
    "duration": Study(
        "configs/mle.yaml",
        {
            "duration weights": {"partial_credit": True, "duration_weights": True},
            "no duration weights": {"partial_credit": True, "duration_weights": False},
        },
        True,
    ),
}
MODEL_CALL = re.compile(r"=\s*([A-Za-z_][\w.]*)\s*\(")


def slug(name: str) -> str:
    return name.replace(" ", "-")


def overrides(args, study: Study, seed: int, arm: str, out_dir: str) -> list[str]:
    flags = study.arms[arm]
    return [
        f"run.out_dir={out_dir}",
        f"run.name=s{seed}_{slug(arm)}",
        "run.resume=false",
        f"run.seed={seed}",
        f"train.steps={args.steps}",
        f"rollout.group_size={args.group_size}",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        "runtime.mode=sync",
        "eval.every=0",
        "eval.size=1",
        f"train.lr={args.lr}",
        "train.checkpoint_every=1000",
        # An arm without reward signal samples as many batches as the others train on, then stops.
        f"train.max_skipped_batches={args.steps}",
        f"task.options.partial_credit={str(flags['partial_credit']).lower()}",
        f"algo.duration_weights={str(flags['duration_weights']).lower()}",
        f"task.options.eval_repeats={args.eval_repeats}",
        *args.set,
    ]


def episode_summary(episodes) -> dict[str, float]:
    """Held-out numbers of a list of episodes: reward, valid rate, milestones, score credit,
    mean sandbox seconds of the actions that ran."""
    ran = [t.env_duration for e in episodes for t in e.turns if not t.malformed]
    metric = lambda key: statistics.fmean(float(e.metrics.get(key, 0.0)) for e in episodes)  # noqa: E731
    return {
        "reward_mean": statistics.fmean(e.reward for e in episodes),
        "valid_rate": metric("valid"),
        "milestones_mean": metric("milestones"),
        "score_credit_mean": metric("score_credit"),
        "duration_mean": statistics.fmean(ran) if ran else 0.0,
        "episodes": len(episodes),
    }


def held_out_eval(session, cfg, improve: bool) -> dict:
    """Held-out evaluation with partial credit ON for every arm: one scratch episode per held-out
    task, and with `improve` also one improvement of it and a second scratch attempt."""
    from practicum.envs.base import Task
    from practicum.envs.mle.cli.evaluate import previous_solution
    from practicum.envs.registry import SuiteContext, build_suite
    from practicum.runtime.rollout import EpisodeBuilder, rollout_batch

    options = {**cfg.task.options, "partial_credit": True}
    suite = build_suite("mle", options, SuiteContext(cfg.run.seed, cfg.rollout.failure_reward))
    params = session.sampling(cfg.eval.temperature)

    def run(tasks, label: str, seed: int):
        builders = [
            EpisodeBuilder(
                suite.make_env(session.models),
                t,
                f"{label}/{t.task_id}",
                i,
                session.chat,
                session.limits,
                params,
                seed,
            )
            for i, t in enumerate(tasks)
        ]
        return rollout_batch(session.server, builders, cfg.rollout.env_workers)

    tasks = suite.eval_tasks
    scratch = run(tasks, "ablation-scratch", cfg.run.seed)
    result = {"scratch": episode_summary(scratch)}
    if improve:
        improved = run(
            [
                Task(t.task_id, {**t.data, "previous": previous_solution(e)})
                for t, e in zip(tasks, scratch)
            ],
            "ablation-improve",
            cfg.run.seed,
        )
        second = run(tasks, "ablation-scratch2", cfg.run.seed + 7919)
        best = lambda a, b: [y if y.reward > x.reward else x for x, y in zip(a, b)]  # noqa: E731
        result["improve"] = episode_summary(improved)
        result["best_scratch_improve"] = episode_summary(best(scratch, improved))
        result["best_two_scratch"] = episode_summary(best(scratch, second))
    return result


def training_curve(run_dir: Path) -> list[dict]:
    """Per sampling policy version (= training step in the sync runtime): mean action duration
    of the actions that ran, score credit, valid rate and which model classes were chosen."""
    by_version: dict[int, list[dict]] = {}
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        ep = json.loads(line)
        if ep["turns"]:
            by_version.setdefault(int(ep["turns"][0]["policy_version"]), []).append(ep)
    curve = []
    for version, eps in sorted(by_version.items()):
        ran = [t["env_duration"] for e in eps for t in e["turns"] if not t["malformed"]]
        models: dict[str, int] = {}
        for e in eps:
            for t in e["turns"]:
                if not t["malformed"] and (m := MODEL_CALL.search(t["action_text"])):
                    models[m.group(1)] = models.get(m.group(1), 0) + 1
        curve.append(
            {
                "step": version + 1,
                "episodes": len(eps),
                "duration_mean": statistics.fmean(ran) if ran else 0.0,
                "reward_mean": statistics.fmean(e["reward"] for e in eps),
                "score_credit_mean": statistics.fmean(
                    float(e["metrics"].get("score_credit", 0.0)) for e in eps
                ),
                "valid_rate": statistics.fmean(float(e["metrics"].get("valid", 0.0)) for e in eps),
                "models": models,
            }
        )
    return curve


def run_arm(args, study_name: str, seed: int, arm: str, runs: str, baseline: dict | None) -> dict:
    from practicum.config import load_config
    from practicum.errors import TrainingError
    from practicum.runtime.loop import train
    from practicum.runtime.session import open_session
    from practicum.runtime.sync import SyncBatches

    study = STUDIES[study_name]
    cfg = load_config(ROOT / study.config, overrides(args, study, seed, arm, runs))
    started = time.perf_counter()
    session = open_session(cfg)
    try:
        if baseline is None:
            baseline = held_out_eval(session, cfg, study.improve_eval)
        stopped = None
        try:
            train(session, SyncBatches(session), progress=True)
        except TrainingError as err:  # no reward signal: every group filtered (module doc)
            stopped = str(err)
        steps = session.learner.step
        # With no step taken the policy is the untrained one: its evaluation is the baseline.
        after = held_out_eval(session, cfg, study.improve_eval) if steps else baseline
    finally:
        session.close()
    return {
        "study": study_name,
        "seed": seed,
        "arm": arm,
        **study.arms[arm],
        "before": baseline,
        "after": after,
        "steps": steps,
        "curve": training_curve(cfg.run_dir),
        "stopped": stopped,
        "seconds": time.perf_counter() - started,
    }


def mean_std(values: list[float]) -> list[float]:
    return [statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0]


def table(records: list[dict]) -> list[dict]:
    """Mean +- std over seeds per (study, arm), and one row per untrained baseline."""
    rows = []
    for study_name, study in STUDIES.items():
        mine = [r for r in records if r["study"] == study_name]
        if not mine:
            continue
        firsts = {r["seed"]: r["before"] for r in mine}
        for arm, evals in [
            ("untrained", list(firsts.values())),
            *[(a, [r["after"] for r in mine if r["arm"] == a]) for a in study.arms],
        ]:
            if not evals:
                continue
            row = {"study": study_name, "arm": arm, "seeds": len(evals)}
            for view in ("scratch", "improve", "best_scratch_improve", "best_two_scratch"):
                if view in evals[0]:
                    row[view] = {
                        k: mean_std([e[view][k] for e in evals])
                        for k in evals[0][view]
                        if k != "episodes"
                    }
            trained = [r for r in mine if r["arm"] == arm]
            if trained:
                curves = [r["curve"] for r in trained if r["curve"]]
                row["train_duration_first_last"] = (
                    mean_std([c[-1]["duration_mean"] - c[0]["duration_mean"] for c in curves])
                    if curves
                    else None
                )
                row["stopped_runs"] = sum(1 for r in trained if r["stopped"])
                row["steps_taken"] = mean_std([r["steps"] for r in trained])
            rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    print(
        f"\n{'study':9s} {'arm':22s} {'n':>2s} {'held-out reward':>17s} {'valid':>12s} "
        f"{'milestones':>12s} {'score credit':>13s} {'run s':>6s} {'steps':>5s}"
    )
    for r in rows:
        s = r["scratch"]
        print(
            f"{r['study']:9s} {r['arm']:22s} {r['seeds']:2d} "
            f"{s['reward_mean'][0]:+8.2f} +- {s['reward_mean'][1]:4.2f} "
            f"{s['valid_rate'][0]:5.2f} +- {s['valid_rate'][1]:.2f} "
            f"{s['milestones_mean'][0]:5.2f} +- {s['milestones_mean'][1]:.2f} "
            f"{s['score_credit_mean'][0]:6.3f} +- {s['score_credit_mean'][1]:.3f} "
            f"{s['duration_mean'][0]:6.2f} {r.get('steps_taken', [0])[0]:5.1f}"
        )
    improve = [r for r in rows if "best_scratch_improve" in r]
    if improve:
        print("\n(c) self-improvement at evaluation (held-out reward, mean +- std over seeds)")
        print(f"{'arm':22s} {'scratch':>15s} {'best(scr, improve)':>19s} {'best(2 scratch)':>16s}")
        for r in improve:
            cells = [
                r[v]["reward_mean"] for v in ("scratch", "best_scratch_improve", "best_two_scratch")
            ]
            print(f"{r['arm']:22s} " + " ".join(f"{m:+9.2f} +- {s:4.2f}" for m, s in cells))


def plot(records: list[dict], rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    # Section-mode rewards all sit near the failure reward: milestones show the differences.
    for ax, study_name, key, title in (
        (axes[0], "partial", "milestones_mean", "(a) section mode: held-out milestones (of 7)"),
        (axes[1], "duration", "reward_mean", "(b, c) template mode: held-out reward"),
    ):
        mine = [r for r in rows if r["study"] == study_name]
        views = ["scratch", "best_scratch_improve", "best_two_scratch"]
        views = [v for v in views if mine and v in mine[0]]
        width = 0.8 / max(1, len(views))
        for k, view in enumerate(views):
            xs = [i + k * width for i in range(len(mine))]
            ax.bar(
                xs,
                [r[view][key][0] for r in mine],
                width,
                yerr=[r[view][key][1] for r in mine],
                capsize=3,
                label=view,
            )
        ax.set_xticks(
            [i + width * (len(views) - 1) / 2 for i in range(len(mine))],
            [r["arm"].replace(" ", "\n", 1) for r in mine],
            fontsize=8,
        )
        ax.set_title(title)
        if len(views) > 1:
            ax.legend(fontsize=7)
    ax = axes[2]
    for r in (r for r in records if r["study"] == "duration"):
        color = "C0" if r["duration_weights"] else "C3"
        ax.plot(
            [c["step"] for c in r["curve"]],
            [c["duration_mean"] for c in r["curve"]],
            color=color,
            alpha=0.7,
            marker="o",
            label=r["arm"] if r["seed"] == min(x["seed"] for x in records) else None,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("mean action run time (s)")
    ax.set_title("(b) run time of sampled actions")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--study", choices=[*STUDIES, "all"], default="all")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("--eval-repeats", type=int, default=2, help="episodes per held-out task")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="extra config overrides for every run, e.g. train.micro_batch_size=1",
    )
    p.add_argument("--report", action="store_true", help="only rewrite the report")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    (out / "mle_ablation_runs").mkdir(parents=True, exist_ok=True)
    studies = [] if args.report else (list(STUDIES) if args.study == "all" else [args.study])
    for study_name in studies:
        for seed in args.seeds:
            baseline = None
            for arm in STUDIES[study_name].arms:
                path = out / "mle_ablation_runs" / f"{study_name}_s{seed}_{slug(arm)}.json"
                if path.exists():
                    baseline = json.loads(path.read_text())["before"]
                    continue
                with tempfile.TemporaryDirectory(prefix="mle-ablation-") as runs:
                    record = run_arm(args, study_name, seed, arm, runs, baseline)
                record["args"], record["machine"] = vars(args), machine_state()
                path.write_text(json.dumps(record, indent=1))
                baseline = record["before"]
                print(
                    f"{study_name} seed {seed} {arm:22s} held-out reward "
                    f"{record['before']['scratch']['reward_mean']:+.2f} -> "
                    f"{record['after']['scratch']['reward_mean']:+.2f} "
                    f"({record['seconds'] / 60:.1f} min)",
                    flush=True,
                )
    records = [
        json.loads(f.read_text()) for f in sorted((out / "mle_ablation_runs").glob("*.json"))
    ]
    if not records:
        raise SystemExit(f"no stored runs under {out / 'mle_ablation_runs'}")
    rows = table(records)
    print_table(rows)
    (out / "mle_ablation.json").write_text(
        json.dumps(
            {
                "machine": machine_state(),
                "table": rows,
                "runs": [{k: v for k, v in r.items() if k != "machine"} for r in records],
            },
            indent=1,
        )
    )
    plot(records, rows, out / "mle_ablation.png")
    print(f"wrote {out / 'mle_ablation.json'} and {out / 'mle_ablation.png'}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
