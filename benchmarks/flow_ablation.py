"""AgentFlow ablation (arXiv 2510.05592, Sec. 4): held-out accuracy per task family, several
seeds, SmolLM2-135M-Instruct as the planner, on configs/flow.yaml.

    .venv/bin/python benchmarks/flow_ablation.py                      # small default budget
    .venv/bin/python benchmarks/flow_ablation.py --seeds 0 1 2 --steps 12 --eval-per-family 12

Arms (per seed; every arm is graded by the same exact checks on the same held-out tasks):
  flow (untrained)      the flow with the untrained planner
  flow + Flow-GRPO      the flow after in-flow RL (`practicum train`, algo.advantage=flow_grpo)
  direct (no flow)      the same (untrained) policy answering alone, one turn, no tools
  tool-integrated       the same policy calling the tools itself in one sequence
  flow + offline SFT    the planner fine-tuned on the planner turns of solved flow rollouts of
                        the untrained planner (`practicum rft`), as many rollouts as RL sampled
  flow + demo SFT       configs/flow.yaml's warm start: SFT on scripted plans of training tasks
                        (envs/flow/demo.py, sft.* of the config)
  flow + demo SFT + Flow-GRPO   configs/flow.yaml's pipeline: the same RL from the SFT adapter
Besides accuracy: planner turns per task (flow steps), the tool-call error rate and the
multihop hop credit (`multihop_hops`: the fraction of chain hops looked up, the per-hop reward
term), before and after RL. Prints a table (mean +- std over seeds) and writes
benchmarks/results/flow_ablation.json with the machine block. Run it alone on the machine; the
default budget is a pipeline check, far too small to separate arms reliably.

    .venv/bin/python benchmarks/flow_ablation.py --scripted 12

runs no model: scripted planners (honest hops, the hop's entity only in Context, repeating hop
1, copying the query, listing every entity) through the real flow env with rules roles on N
multihop tasks per seed, and writes benchmarks/results/flow_scripted_planners.json: solve rate
and hop credit per planner (what the reward can and cannot be gamed into).
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
CONFIG = ROOT / "configs" / "flow.yaml"
ARMS = [
    "flow (untrained)",
    "flow + Flow-GRPO",
    "direct (no flow)",
    "tool-integrated",
    "flow + offline SFT",
    "flow + demo SFT",
    "flow + demo SFT + Flow-GRPO",
]


def base_overrides(args, seed: int, out: str, name: str) -> list[str]:
    return [
        f"run.out_dir={out}",
        f"run.name={name}",
        "run.resume=false",
        f"run.seed={seed}",
        f"task.options.eval_per_family={args.eval_per_family}",
        f"task.options.world_seed={seed}",
        f"train.steps={args.steps}",
        f"rollout.group_size={args.group_size}",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        "eval.every=0",
        "train.checkpoint_every=1000",
        "runtime.mode=sync",
        *args.set,
    ]


def family_scores(ev: dict) -> dict[str, float]:
    out = {k.removeprefix("env/acc/"): v for k, v in ev.items() if k.startswith("env/acc/")}
    out["all"] = ev["solved_rate"]
    out["steps"] = ev.get("env/steps", 0.0)
    out["tool_error_rate"] = ev.get("env/tool_error_rate", 0.0)
    if "env/hops/multihop" in ev:
        out["multihop_hops"] = ev["env/hops/multihop"]
    return out


def scripted_planners(n: int, seeds: list[int]) -> dict:
    """Solve rate, hop credit and reward of scripted planners through the real env (module
    doc), per seed: no model, seconds."""
    from practicum.envs.flow.demo import RELATION_NOUNS, hop_plan
    from practicum.envs.flow.demo import plan as tool_plan
    from practicum.envs.registry import SuiteContext, build_suite

    def hop(i, task):
        rels, chain = task.data["relations"], task.data["chain"]
        i = min(i, len(rels) - 1)
        return RELATION_NOUNS.get(rels[i], rels[i]), chain[i]

    def plan(sub, ctx="none"):
        return tool_plan(sub, "lookup", ctx)

    planners = {
        "honest hops": lambda i, m, t, titles: hop_plan(t, i, ""),
        "entity only in Context": lambda i, m, t, titles: plan(
            f"Find the {hop(i, t)[0]}.", m.steps[-1].result if m.steps else t.data["question"]
        ),
        "repeat hop 1": lambda i, m, t, titles: plan("Find the {} of {}.".format(*hop(0, t))),
        "copy the query": lambda i, m, t, titles: plan(t.data["question"]),
        "list every entity": lambda i, m, t, titles: plan(f"Find the {hop(i, t)[0]} of {titles}."),
    }
    rules = {"analyst": "rules", "executor": "rules", "verifier": "rules", "generator": "rules"}
    out: dict = {name: {"solved": [], "hops": [], "reward": []} for name in planners}
    for seed in seeds:
        suite = build_suite(
            "flow",
            {
                **rules,
                "families": {"multihop": 1},
                "train_size": n,
                "eval_per_family": 1,
                "tools": ["search", "lookup"],
            },
            SuiteContext(seed),
        )
        titles = ", ".join(suite.make_env(None).world.titles)
        for name, planner in planners.items():
            solved = hops = reward = 0.0
            for task in suite.train_tasks:
                with suite.make_env(None) as env:
                    env.reset(task)
                    for i in range(env.max_steps):
                        r = env.step(planner(i, env.memory, task, titles))
                        if r.done:
                            break
                solved += float(r.solved)
                hops += r.metrics["hops/multihop"]
                reward += r.reward
            k = len(suite.train_tasks)
            out[name]["solved"].append(solved / k)
            out[name]["hops"].append(hops / k)
            out[name]["reward"].append(reward / k)
    return out


def evaluate_mode(args, seed: int, out: str, mode: str) -> dict[str, float]:
    from practicum.config import load_config
    from practicum.runtime.progress import counting
    from practicum.runtime.session import open_session

    cfg = load_config(
        CONFIG,
        base_overrides(args, seed, out, f"s{seed}_{mode}")
        + [
            f"task.options.mode={mode}",  # room for the answer turn
            f"rollout.max_turns={args.max_turns + 1}",
        ],
    )
    s = open_session(cfg)
    try:
        with counting(
            f"evaluating {mode} (seed {seed})", len(s.eval_tasks), log_dir=s.run_dir
        ) as count:
            return family_scores(s.evaluate(mode, lambda episode: count.advance()))
    finally:
        s.close()


def run_seed(args, seed: int, out: str) -> dict[str, dict[str, float]]:
    from practicum.config import load_config
    from practicum.runtime.rft import run_rft

    res: dict[str, dict[str, float]] = {}
    cfg = load_config(CONFIG, base_overrides(args, seed, out, f"s{seed}_rl"))
    rl = rl_arm(cfg)
    res["flow (untrained)"] = family_scores(rl["eval_before"])
    res["flow + Flow-GRPO"] = family_scores(rl["eval_after"])
    res["flow + Flow-GRPO"]["rl_steps"] = float(rl["steps"])
    res["direct (no flow)"] = evaluate_mode(args, seed, out, "direct")
    res["tool-integrated"] = evaluate_mode(args, seed, out, "tool_integrated")
    episodes = args.steps * args.group_size * args.tasks_per_step
    cfg = load_config(
        CONFIG,
        base_overrides(args, seed, out, f"s{seed}_sft")
        + [
            f"rft.tasks={args.steps * args.tasks_per_step}",
            f"rft.samples_per_task={args.group_size}",
            "rft.temperature=0.8",
            "rft.epochs=2",
        ],
    )
    reuse_untrained_eval(Path(out) / f"s{seed}_rl", Path(out) / f"s{seed}_sft")
    sft = run_rft(cfg, progress=True)
    res["flow + offline SFT"] = family_scores(sft["eval_after"])
    res["flow + offline SFT"]["kept"] = float(sft["kept"])
    res["flow + offline SFT"]["sampled"] = float(episodes)
    res.update(demo_pipeline(args, seed, out))
    return res


def demo_pipeline(args, seed: int, out: str) -> dict[str, dict[str, float]]:
    """configs/flow.yaml's own stages (demo SFT, then Flow-GRPO) under the arms' budget."""
    from practicum.config import load_config
    from practicum.stages import run_stages

    cfg = load_config(CONFIG, base_overrides(args, seed, out, f"s{seed}_demo"))
    report = run_stages(cfg, progress=True)
    sft, rl = (Path(r["run_dir"]) for r in report["stages"])
    after_sft = json.loads(next(sft.rglob("eval/after.json")).read_text())
    after_rl = json.loads(sorted((rl / "eval").glob("step_*.json"))[-1].read_text())
    res = {
        "flow + demo SFT": family_scores(after_sft),
        "flow + demo SFT + Flow-GRPO": family_scores(after_rl),
    }
    res["flow + demo SFT"]["kept"] = float(report["stages"][0]["kept"])
    res["flow + demo SFT + Flow-GRPO"]["rl_steps"] = float(report["stages"][1]["steps"])
    return res


def rl_arm(cfg) -> dict:
    """The in-flow RL run. If no sampled group ever had a reward signal (every episode failed:
    dynamic sampling filters them all and training stops at step 0), the trained planner is the
    untrained one: 'after' = 'before', 0 steps. The reason is kept in RUN/stopped.txt, and a
    re-run of the benchmark reuses it."""
    from practicum.errors import TrainingError
    from practicum.runtime.train import run_training

    stopped = cfg.run_dir / "stopped.txt"
    if not stopped.exists():
        try:
            return run_training(cfg, progress=True)
        except TrainingError as err:
            stopped.write_text(str(err) + "\n")
    step0 = json.loads((cfg.run_dir / "eval" / "step_000000.json").read_text())
    return {"eval_before": step0, "eval_after": step0, "steps": 0}


def reuse_untrained_eval(rl_dir: Path, sft_dir: Path) -> None:
    """The SFT arm starts from the same untrained planner on the same held-out tasks as the RL
    run's step-0 evaluation: give `practicum rft` that evaluation instead of repeating it."""
    src, dest = rl_dir / "eval" / "step_000000.json", sft_dir / "rft" / "eval" / "before.json"
    if src.exists() and not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(src.read_text())
        data.update(label="before", reused_from=str(src))
        dest.write_text(json.dumps(data, indent=1))


def finished_seed(args, seed: int, out: str) -> dict[str, dict[str, float]]:
    """One seed's arms, saved in `out` as soon as they finish: a re-run with the same --out
    (after a crash or a killed session) skips the seeds already done."""
    path = Path(out) / f"seed{seed}.json"
    if path.exists():
        print(f"seed {seed}: reusing {path}")
        return json.loads(path.read_text())
    res = run_seed(args, seed, out)
    path.write_text(json.dumps(res, indent=1))
    print(f"seed {seed} done: {path}", flush=True)
    return res


def plot(table: dict, dest: Path) -> None:
    """Held-out accuracy per arm and task family: mean over seeds, std as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = [c for c in ("all", "arithmetic", "multihop") if any(table[a].get(c) for a in ARMS)]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(ARMS)
    for i, arm in enumerate(ARMS):
        vals = [table[arm].get(f) or [0.0] for f in families]
        ax.bar(
            [j + i * width for j in range(len(families))],
            [statistics.mean(v) for v in vals],
            width,
            yerr=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in vals],
            label=arm,
            capsize=3,
        )
    ax.set_xticks([j + width * (len(ARMS) - 1) / 2 for j in range(len(families))], families)
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("AgentFlow ablation (mean +- std over seeds)")
    fig.tight_layout()
    fig.savefig(dest, dpi=110)
    plt.close(fig)


def mean_std(xs: list[float]) -> str:
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} +- {sd:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tasks-per-step", type=int, default=3)
    p.add_argument("--eval-per-family", type=int, default=6)
    p.add_argument("--max-turns", type=int, default=4, help="= rollout.max_turns of flow.yaml")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        help="extra config overrides for every "
        "arm, e.g. model.model=/path/to/tiny (a pipeline smoke test)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="run folders and finished seeds (default: a "
        "temporary folder); re-run with the same --out to resume",
    )
    p.add_argument(
        "--scripted",
        type=int,
        default=0,
        metavar="N",
        help="only the scripted planners on N multihop tasks per seed (no model)",
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.time()
    if args.scripted:
        res = scripted_planners(args.scripted, args.seeds)
        print(f"{'planner':<24}{'solved':>18}{'hop credit':>18}{'reward':>18}")
        for name, r in res.items():
            print(
                f"{name:<24}"
                + "".join(f"{mean_std(r[c]):>18}" for c in ("solved", "hops", "reward"))
            )
        dest = ROOT / "benchmarks" / "results" / "flow_scripted_planners.json"
        dest.write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "planners": res,
                    "wall_seconds": time.time() - started,
                    "machine": machine_state(),
                },
                indent=1,
            )
        )
        print(f"wrote {dest}")
        return
    out = args.out or tempfile.mkdtemp(prefix="flow-ablation-")
    per_seed = {seed: finished_seed(args, seed, out) for seed in args.seeds}
    columns = sorted(
        {
            k
            for r in per_seed.values()
            for a in r.values()
            for k in a
            if k not in ("kept", "sampled")
        }
    )
    table = {
        arm: {
            c: [per_seed[s][arm][c] for s in args.seeds if c in per_seed[s][arm]] for c in columns
        }
        for arm in ARMS
    }
    print(f"{'arm':<30}" + "".join(f"{c:>20}" for c in columns))
    for arm in ARMS:
        print(f"{arm:<30}" + "".join(f"{mean_std(table[arm][c]):>20}" for c in columns))
    result = {
        "args": vars(args),
        "per_seed": per_seed,
        "table": table,
        "wall_seconds": time.time() - started,
        "machine": machine_state(),
    }
    dest = ROOT / "benchmarks" / "results" / "flow_ablation.json"
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(result, indent=1))
    plot(table, dest.with_suffix(".png"))
    print(f"wrote {dest} ({(time.time() - started) / 60:.1f} min)")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
