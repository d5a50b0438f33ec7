"""The SWE pipeline of arXiv 2508.03501 at toy scale: held-out resolve rate of the base model,
after RFT and after RFT+RL, over seeds; environment throughput.

For each seed, runs the config's stages (configs/swe.yaml: rft -> rl -> refreshed rl) with
run.seed = seed into a scratch folder, then samples k episodes (temperature 1) per held-out
task from each policy: base (no adapter), after RFT (stage 0) and after the last RL stage.
pass@1 = mean solve rate of the k samples, pass@k = share of tasks solved at least once
(the unbiased estimator of Chen et al. 2021 with n = k). Throughput: episodes per minute of
those evaluations and the grading seconds per graded episode (env metric grade_seconds).
Prints a table, writes benchmarks/results/swe_pipeline.{json,png}.

    python benchmarks/swe_pipeline.py [--config configs/swe.yaml] [--seeds 0 1 2] [--k 4]
        [set key=value ...]           (overrides for a smaller budget, e.g. train.steps=1)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS = Path(__file__).parent / "results"


def held_out_pass(cfg, init: str | None, k: int, out: Path) -> dict:
    """pass@1 and pass@k of policy `init` on the held-out tasks, k samples each."""
    from practicum.report import solved
    from practicum.runtime.session import open_session

    run = cfg.run.model_copy(update={"out_dir": str(out.parent), "name": out.name,
                                     "resume": False})
    sub = cfg.model_copy(update={"run": run, "stages": [],
                                 "model": cfg.model.model_copy(update={"init": init})})
    s = open_session(sub)
    t0 = time.time()
    try:
        tasks = s.suite.eval_tasks
        eps = s.rollout([(t, f"pass/{t.task_id}", j) for t in tasks for j in range(k)], 1.0)
    finally:
        s.close()
    minutes = (time.time() - t0) / 60
    by_task: dict[str, list[bool]] = {}
    for e in eps:
        by_task.setdefault(e.task_id, []).append(solved(e, 1.0))
    grading = [e.metrics["grade_seconds"] for e in eps if e.metrics.get("patch_lines")]
    return {"pass@1": sum(map(sum, by_task.values())) / max(1, len(eps)),
            f"pass@{k}": sum(any(v) for v in by_task.values()) / max(1, len(by_task)),
            "tasks": len(by_task), "episodes": len(eps),
            "episodes_per_minute": len(eps) / max(minutes, 1e-9),
            "grading_seconds_mean": sum(grading) / len(grading) if grading else None,
            "graded_episodes": len(grading)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/swe.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--k", type=int, default=4)
    p.add_argument("overrides", nargs="*", help="dotted config overrides")
    args = p.parse_args()
    from practicum.config import load_config
    from practicum.stages import run_stages

    state = machine_state()
    rows = []
    with tempfile.TemporaryDirectory(prefix="swe-pipeline-") as tmp:
        for seed in args.seeds:
            cfg = load_config(args.config, [*args.overrides, f"run.seed={seed}",
                                            f"run.out_dir={tmp}", f"run.name=seed{seed}"])
            t0 = time.time()
            report = run_stages(cfg, progress=True)
            pipeline_minutes = (time.time() - t0) / 60
            stages = report["stages"]
            policies = {"base": cfg.model.init, "after RFT": stages[0]["policy"],
                        "after RFT+RL": stages[-1]["policy"]}
            for label, init in policies.items():
                res = held_out_pass(cfg, init, args.k, Path(tmp) / f"eval-{seed}-{len(rows)}")
                rows.append({"seed": seed, "policy": label, **res,
                             "pipeline_minutes": pipeline_minutes,
                             "pipeline_episodes": sum(s["episodes"] for s in stages)})
                print(label, seed, res)
    k = args.k
    table = Table(title=f"SWE pipeline, held-out resolve rate ({len(args.seeds)} seeds, k={k})")
    for col in ("policy", "pass@1 mean", f"pass@{k} mean", "episodes/min", "grading s/task"):
        table.add_column(col)
    summary = {}
    for label in ("base", "after RFT", "after RFT+RL"):
        rs = [r for r in rows if r["policy"] == label]
        g = [r["grading_seconds_mean"] for r in rs if r["grading_seconds_mean"] is not None]
        summary[label] = {
            "pass@1": sum(r["pass@1"] for r in rs) / len(rs),
            f"pass@{k}": sum(r[f"pass@{k}"] for r in rs) / len(rs),
            "episodes_per_minute": sum(r["episodes_per_minute"] for r in rs) / len(rs),
            "grading_seconds": sum(g) / len(g) if g else None}
        sm = summary[label]
        table.add_row(label, f"{sm['pass@1']:.3f}", f"{sm[f'pass@{k}']:.3f}",
                      f"{sm['episodes_per_minute']:.1f}",
                      "-" if sm["grading_seconds"] is None else f"{sm['grading_seconds']:.2f}")
    Console().print(table)
    RESULTS.mkdir(exist_ok=True)
    out = {"config": args.config, "overrides": args.overrides, "seeds": args.seeds, "k": k,
           "summary": summary, "rows": rows, "machine": state}
    (RESULTS / "swe_pipeline.json").write_text(json.dumps(out, indent=1))
    plot(summary, k, RESULTS / "swe_pipeline.png")


def plot(summary: dict, k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary)
    x = range(len(labels))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([i - 0.2 for i in x], [summary[lab]["pass@1"] for lab in labels], 0.4,
           label="pass@1")
    ax.bar([i + 0.2 for i in x], [summary[lab][f"pass@{k}"] for lab in labels], 0.4,
           label=f"pass@{k}")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("held-out resolve rate")
    ax.set_title("SWE pipeline (SmolLM2-135M, bundled suite)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
