"""The SWE pipeline of arXiv 2508.03501 at toy scale: resolve rates of the base model and after
every kind of stage (SFT warm start, RFT, RL), over seeds; environment throughput.

For each seed, runs (or resumes) the config's stages (configs/swe.yaml: sft -> rft -> rl ->
refreshed rl) with run.seed = seed in runs/swe_pipeline/seed<N>, then samples k episodes
(temperature 1) per held-out task (and, with --train-tasks, per training task) from each
policy: base (no adapter), after the first SFT stage, after the first RFT stage, after the
first RL stage (where there are two) and after the last RL stage, all under the config's base
rollout settings. Per stage it also records what the
stage itself did: episodes kept by SFT / RFT and the share of their training episodes that
resolved, RL steps taken. pass@1 = mean solve rate of the k
samples, pass@k = share of tasks solved at least once (the unbiased estimator of Chen et al.
2021 with n = k). Throughput: episodes per minute of those evaluations and the grading seconds
per graded episode (env metric grade_seconds).

Every (seed, policy) result is stored in benchmarks/results/swe_pipeline_runs/<stage kinds>/
(e.g. sft-rft-rl-rl) as it finishes, each split's (held-out, training) in its evaluation folder
(pass_at_k.json, and the sampled episodes in episodes.jsonl),
so a killed benchmark resumes where it stopped and seeds can run as separate processes;
`--use-run SEED=PATH` takes a finished pipeline run (e.g. the main job's runs/swe, seed 0) for
that seed instead of training it again. Prints a table, writes
benchmarks/results/swe_pipeline.{json,png}.

RL variants: `--tag NAME` keeps a variant's records and report apart (records in
<stage kinds>+NAME/, report swe_pipeline_NAME.{json,png}); `--warm-start-from SEED=PATH`
copies PATH's finished SFT and RFT stages into the seed's run, so the variant's RL stages start
from the very policy the main run's did, e.g. a gentler DAPO from seed 0's warm start:

    python benchmarks/swe_pipeline.py --seeds 0 --train-tasks --tag lr5e-5-g8
        --runs runs/swe_dapo --warm-start-from 0=runs/swe train.lr=5e-5 rollout.group_size=8
        --policies "after RL 1" "after RL"

    python benchmarks/swe_pipeline.py [--config configs/swe.yaml] [--seeds 0 1 2] [--k 4]
        [--use-run 0=runs/swe] [--policies "after RL"] [--tag NAME]
        [--warm-start-from 0=runs/swe] [--report] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)
from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).parent / "results"
RECORDS = RESULTS / "swe_pipeline_runs"
POLICIES = ("base", "after SFT", "after RFT", "after RL 1", "after RL")
"""`after RL` is the last RL stage's policy; `after RL 1` the first's, where there are two."""
STAGE_POLICY = {"sft": "after SFT", "rft": "after RFT", "rl": "after RL"}
RESULT_KEYS = {
    "tasks",
    "episodes",
    "episodes_with_patch",
    "malformed_turn_rate",
    "episodes_per_minute",
    "grading_seconds_mean",
}


def held_out_pass(cfg, init: str | None, k: int, out: Path, split: str = "eval") -> dict:
    """pass@1 and pass@k of policy `init` on the held-out (split=eval) or training tasks, k
    samples each."""
    from practicum.report import solved
    from practicum.runtime.session import open_session

    finished = out / "pass_at_k.json"  # a killed benchmark resumes after the last whole split
    if finished.is_file():
        saved = json.loads(finished.read_text())
        if saved.pop("for", None) == [init, k]:  # another policy or k: evaluate again
            return saved
    run = cfg.run.model_copy(update={"out_dir": str(out.parent), "name": out.name, "resume": False})
    sub = cfg.model_copy(
        update={"run": run, "stages": [], "model": cfg.model.model_copy(update={"init": init})}
    )
    s = open_session(sub)
    t0 = time.time()
    try:
        tasks = s.suite.eval_tasks if split == "eval" else s.suite.train_tasks
        eps = s.rollout([(t, f"pass/{t.task_id}", j) for t in tasks for j in range(k)], 1.0)
    finally:
        s.close()
    minutes = (time.time() - t0) / 60
    with open(out / "episodes.jsonl", "w") as f:  # the episodes' text, for failure analysis
        f.writelines(e.to_json() + "\n" for e in eps)
    by_task: dict[str, list[bool]] = {}
    for e in eps:
        by_task.setdefault(e.task_id, []).append(solved(e, 1.0))
    grading = [e.metrics["grade_seconds"] for e in eps if e.metrics.get("patch_lines")]
    malformed = [t.malformed for e in eps for t in e.turns]
    res = {
        "pass@1": sum(map(sum, by_task.values())) / max(1, len(eps)),
        f"pass@{k}": sum(any(v) for v in by_task.values()) / max(1, len(by_task)),
        "tasks": len(by_task),
        "episodes": len(eps),
        "episodes_with_patch": len(grading),
        "malformed_turn_rate": sum(malformed) / max(1, len(malformed)),
        "episodes_per_minute": len(eps) / max(minutes, 1e-9),
        "grading_seconds_mean": sum(grading) / len(grading) if grading else None,
    }
    finished.write_text(json.dumps({**res, "for": [init, k]}, indent=1))
    return res


def weights_key(init: str | None) -> str | None:
    """What decides a policy's outputs: None for the base model, also for a LoRA adapter whose
    B matrices are all zero (LoRA's initial state, left by an RFT stage that kept no episode),
    else the folder. Equal keys sample equal tokens under equal seeds."""
    if init is None:
        return None
    from safetensors.torch import load_file

    path = Path(init) / "adapter_model.safetensors"
    if path.is_file():
        tensors = load_file(str(path))
        if all(not t.any() for name, t in tensors.items() if "lora_B" in name):
            return None
    return str(Path(init).resolve())


def record_path(seed: int, label: str, kinds: str) -> Path:
    """`kinds`: the config's stage kinds joined by '-', plus '+tag' for a variant (records of
    different pipelines never mix)."""
    return RECORDS / kinds / f"s{seed}_{label.replace(' ', '_').replace('+', '')}.json"


def copy_warm_start(source: Path, run_dir: Path) -> None:
    """Copy `source`'s finished SFT and RFT stage folders into `run_dir` (the pipeline skips
    finished stages), so RL variants start from one policy. Refuses a source whose warm start
    is unfinished and a `run_dir` that already has different ones."""
    import shutil

    stages = sorted(source.glob("*-*/stage.json"))
    warm = [m.parent for m in stages if json.loads(m.read_text())["kind"] in ("sft", "rft")]
    if not warm:
        raise SystemExit(f"--warm-start-from: no finished sft/rft stage in {source}")
    for folder in warm:
        target = run_dir / folder.name
        if target.exists():
            if (target / "stage.json").read_text() != (folder / "stage.json").read_text():
                raise SystemExit(f"--warm-start-from: {target} exists and differs from {folder}")
            continue
        shutil.copytree(folder, target)


def stage_kinds(config: str, overrides: list[str]) -> str:
    from practicum.config import load_config

    return "-".join(s.kind for s in load_config(config, overrides).stages)


def run_seed(args, seed: int, run_dir: Path) -> None:
    """Train (or resume, or reuse) one seed's pipeline, then evaluate its policies."""
    from practicum.config import load_config
    from practicum.stages import run_stages

    cfg = load_config(
        args.config,
        [
            *args.overrides,
            f"run.seed={seed}",
            f"run.out_dir={run_dir.parent}",
            f"run.name={run_dir.name}",
        ],
    )
    t0 = time.time()
    report = run_stages(cfg, progress=True)
    stages = report["stages"]
    pipeline = {
        "run_dir": str(run_dir),
        "pipeline_minutes": sum(s["minutes"] for s in stages),
        "pipeline_episodes": sum(s["episodes"] for s in stages),
        "kept": {s["name"]: s.get("kept") for s in stages if "kept" in s},
        "rl_steps": [s.get("steps") for s in stages if s["kind"] == "rl"],
        "stages": [
            {
                k: s.get(k)
                for k in (
                    "name",
                    "kind",
                    "held_out_before",
                    "held_out_after",
                    "minutes",
                    "episodes",
                    "kept",
                    "steps",
                    "stopped",
                )
            }
            for s in stages
        ],
    }
    print(f"seed {seed}: pipeline ready in {time.time() - t0:.0f} s")
    policies = {"base": cfg.model.init}
    for stage in stages:  # the first sft, the first rft, the last rl
        label = STAGE_POLICY[stage["kind"]]
        if label not in policies or stage["kind"] == "rl":
            policies[label] = stage["policy"]
    rl = [s["policy"] for s in stages if s["kind"] == "rl"]
    if len(rl) > 1:  # tells the first RL stage from the refreshed one
        policies["after RL 1"] = rl[0]
    policies = {label: policies[label] for label in POLICIES if label in policies}
    kinds = "-".join(s["kind"] for s in stages) + (f"+{args.tag}" if args.tag else "")
    done: dict[str | None, dict] = {}
    for label, init in policies.items():
        if args.policies and label not in args.policies:
            continue
        path = record_path(seed, label, kinds)
        key = weights_key(init)
        if path.exists():
            done.setdefault(key, json.loads(path.read_text()))
            continue
        if key in done:  # the same weights as an evaluated policy: the same samples
            res = {k: v for k, v in done[key].items() if k in RESULT_KEYS or k.startswith("pass@")}
            res["same_weights_as"] = done[key]["policy"]
        else:
            res = held_out_pass(cfg, init, args.k, run_dir / "pass_at_k" / path.stem)
            if args.train_tasks:
                train = held_out_pass(
                    cfg, init, args.k, run_dir / "pass_at_k" / f"{path.stem}_train", split="train"
                )
                res.update({f"train_{m}": v for m, v in train.items() if m.startswith("pass@")})
        rec = {
            "seed": seed,
            "policy": label,
            "init": init,
            "k": args.k,
            **res,
            **pipeline,
            "machine": machine_state(),
        }
        done.setdefault(key, rec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec, indent=1))
        print(label, seed, res)


def mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def report(seeds: list[int], k: int, config: str, overrides: list[str], tag: str = "") -> None:
    kinds = stage_kinds(config, overrides) + (f"+{tag}" if tag else "")
    name = f"swe_pipeline_{tag}" if tag else "swe_pipeline"
    rows = [
        json.loads(record_path(s, lab, kinds).read_text())
        for s in seeds
        for lab in POLICIES
        if record_path(s, lab, kinds).exists()
    ]
    done = sorted({r["seed"] for r in rows})
    table = Table(title=f"SWE pipeline {kinds}, resolve rates (seeds {done}, k={k})")
    for col in (
        "policy",
        "pass@1",
        f"pass@{k}",
        "train pass@1",
        f"train pass@{k}",
        "patch rate",
        "malformed turns",
        "episodes/min",
        "grading s/episode",
    ):
        table.add_column(col)
    summary = {}
    for label in POLICIES:
        rs = [r for r in rows if r["policy"] == label]
        if not rs:
            continue
        g = [r["grading_seconds_mean"] for r in rs if r["grading_seconds_mean"] is not None]
        p1, pk = mean_std([r["pass@1"] for r in rs]), mean_std([r[f"pass@{k}"] for r in rs])
        sm = summary[label] = {
            "seeds": len(rs),
            "pass@1": p1[0],
            "pass@1_std": p1[1],
            f"pass@{k}": pk[0],
            f"pass@{k}_std": pk[1],
            "patch_rate": statistics.fmean(r["episodes_with_patch"] / r["episodes"] for r in rs),
            "malformed_turn_rate": statistics.fmean(r["malformed_turn_rate"] for r in rs),
            "episodes_per_minute": statistics.fmean(r["episodes_per_minute"] for r in rs),
            "grading_seconds": statistics.fmean(g) if g else None,
            "seeds_with_base_weights": sum(r.get("same_weights_as") == "base" for r in rs),
        }
        for m in ("pass@1", f"pass@{k}"):
            got = [r[f"train_{m}"] for r in rs if f"train_{m}" in r]
            sm[f"train_{m}"], sm[f"train_{m}_std"] = mean_std(got) if got else (None, None)
        same = sm["seeds_with_base_weights"]
        train = [
            "-" if sm[f"train_{m}"] is None else f"{sm[f'train_{m}']:.3f}"
            for m in ("pass@1", f"pass@{k}")
        ]
        table.add_row(
            label + (f" (= base in {same}/{len(rs)} seeds)" if same else ""),
            f"{p1[0]:.3f} ± {p1[1]:.3f}",
            f"{pk[0]:.3f} ± {pk[1]:.3f}",
            *train,
            f"{sm['patch_rate']:.2f}",
            f"{sm['malformed_turn_rate']:.2f}",
            f"{sm['episodes_per_minute']:.1f}",
            "-" if sm["grading_seconds"] is None else f"{sm['grading_seconds']:.2f}",
        )
    Console().print(table)
    pipelines = {
        r["seed"]: {
            k2: r.get(k2)
            for k2 in ("pipeline_minutes", "pipeline_episodes", "kept", "rl_steps", "stages")
        }
        for r in rows
    }
    for seed, pl in sorted(pipelines.items()):
        print(
            f"seed {seed}: pipeline {pl['pipeline_minutes']:.1f} min, "
            f"{pl['pipeline_episodes']} episodes, kept {pl['kept']}, "
            f"RL steps {pl['rl_steps']}"
        )
        for st in pl["stages"] or []:
            print(
                f"  {st['name']:>5} ({st.get('kind')}): held-out {st['held_out_before']} -> "
                f"{st['held_out_after']}, episodes {st['episodes']}, kept {st.get('kept')}, "
                f"steps {st.get('steps')}"
            )
    gold = gold_grading_seconds()
    if gold:  # agent episodes without a patch are not graded: the suite check's timing
        print(
            f"grading a patch: {gold['gold']:.2f} s per task (gold), {gold['empty']:.2f} s "
            f"(empty), over {gold['tasks']} tasks (swe_suite.json)"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {
        "config": config,
        "overrides": overrides,
        "tag": tag,
        "seeds": done,
        "k": k,
        "summary": summary,
        "pipelines": pipelines,
        "gold_check_grading_seconds": gold,
        "rows": rows,
        "machine": machine_state(),
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1))
    if summary:
        plot(summary, k, RESULTS / f"{name}.png")


def gold_grading_seconds() -> dict | None:
    """Mean seconds to grade the gold and the empty patch per task, from the suite check
    (benchmarks/swe_suite.py), for when the policies produced no patch to time."""
    path = RESULTS / "swe_suite.json"
    if not path.is_file():
        return None
    tasks = json.loads(path.read_text())["tasks"]
    return {
        "tasks": len(tasks),
        "gold": statistics.fmean(t["gold_seconds"] for t in tasks),
        "empty": statistics.fmean(t["empty_seconds"] for t in tasks),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/swe.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--k", type=int, default=4)
    p.add_argument(
        "--runs", default="runs/swe_pipeline", help="where each seed's pipeline run lives (seed<N>)"
    )
    p.add_argument(
        "--use-run",
        action="append",
        default=[],
        metavar="SEED=PATH",
        help="a finished pipeline run of this config to use for SEED",
    )
    p.add_argument("--report", action="store_true", help="only rebuild table, JSON and plot")
    p.add_argument(
        "--train-tasks", action="store_true", help="also pass@1/pass@k on the training tasks"
    )
    p.add_argument(
        "--policies",
        nargs="+",
        choices=POLICIES,
        metavar="POLICY",
        help=f"evaluate only these of {POLICIES} (a second process can take some "
        "while another evaluates the rest)",
    )
    p.add_argument(
        "--tag",
        default="",
        help="a variant's name: its records and report are kept apart from the config's own",
    )
    p.add_argument(
        "--warm-start-from",
        action="append",
        default=[],
        metavar="SEED=PATH",
        help="copy PATH's finished SFT and RFT stages into SEED's run first (RL "
        "variants from the same warm start)",
    )
    p.add_argument("overrides", nargs="*", help="dotted config overrides")
    args = p.parse_args()
    reuse = {int(a.split("=", 1)[0]): Path(a.split("=", 1)[1]) for a in args.use_run}
    warm = {int(a.split("=", 1)[0]): Path(a.split("=", 1)[1]) for a in args.warm_start_from}
    if not args.report:
        for seed in args.seeds:
            run_dir = reuse.get(seed, Path(args.runs) / f"seed{seed}")
            if seed in warm:
                copy_warm_start(warm[seed], run_dir)
            run_seed(args, seed, run_dir)
    report(args.seeds, args.k, args.config, args.overrides, args.tag)


def plot(summary: dict, k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary)
    x = range(len(labels))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
    for ax, prefix, title in ((axes[0], "train_", "training tasks"), (axes[1], "", "held-out")):
        for shift, m in ((-0.2, "pass@1"), (0.2, f"pass@{k}")):
            vals = [summary[lab].get(prefix + m) or 0.0 for lab in labels]
            err = [summary[lab].get(prefix + m + "_std") or 0.0 for lab in labels]
            ax.bar([i + shift for i in x], vals, 0.4, yerr=err, label=m)
        ax.set_xticks(list(x), labels)
        ax.set_title(f"{title} (SmolLM2-135M, bundled suite)")
    axes[0].set_ylabel("resolve rate")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
