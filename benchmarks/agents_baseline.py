"""Base vs RL-trained policy under the same third-party scaffold, on the same held-out tasks
(issue 12, item 4): the prompted-agent baseline of arXiv 2509.01684 (AIDE on the held-out MLE
competitions) and the identical-scaffold comparison of arXiv 2508.03501 (mini-swe-agent on the
held-out SWE tasks), beside practicum's own held-out result for the same runs.

    python benchmarks/agents_baseline.py --tasks 3                 # both agents, both policies
    python benchmarks/agents_baseline.py --agents mini --swe-run runs/swe
    python benchmarks/agents_baseline.py --report                  # table + plot from records

For each agent it starts `practicum serve RUN --name policy` as a subprocess: one server holds
the trained policy (`policy`) and its base (`policy-base`, adapter off), so both policies face
the same engine, prompts and budget. Each (agent, policy, task) runs once with a small budget
(AIDE: `--aide-steps` plan-code-review steps; mini-swe-agent: `--mini-steps` steps of at most
`--mini-max-tokens` tokens) and a wall-clock limit per task, then is graded by practicum's own
graders (`practicum.serve.agents`): AIDE's last submission.csv on the competition's private
answers (the score credit is the MLE env's: normalised on the competition's leaderboard, 0 for
an invalid or missing submission); mini-swe-agent's diff with the SWE env's FULL rule (reward 1
if resolved). Tokens served per task come from the server's /health counters.

Every finished (agent, policy, task) is stored as OUT/agents_baseline_runs/<agent>_<policy>_
<task>.json at once, so a killed run resumes; a record is reused only if it was made against
the same served target with the same budget. practicum's own rows come from the runs' held-out
evaluations (MLE: eval/step_000000.json vs the last eval file; SWE pipeline: the first stage's
evaluation before training vs the last stage's final one), restricted to the same tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ("aide", "mini")
POLICIES = ("base", "trained")
SERVED_NAME = "policy"
"""Model id of the trained policy on the benchmark's servers (its base: `policy-base`)."""
SCAFFOLD = {
    "aide": "AIDE (aideml 0.2.2)",
    "mini": "mini-swe-agent 2.4.6",
    "practicum-mle": "practicum MLE env (template)",
    "practicum-swe": "practicum SWE env",
}
SUITE = {"aide": "mle", "mini": "swe", "practicum-mle": "mle", "practicum-swe": "swe"}


# -- what is served and which tasks --------------------------------------------------------------


def serve_target(run: str | Path) -> Path | str:
    """What `practicum serve` gets for a run: a stage pipeline's last finished stage's policy
    (`practicum.stages.pipeline_policy`, which serve also accepts directly; resolved here so the
    records name it); a run, checkpoint or policy folder as is; a plain model spec as text."""
    from practicum.stages import pipeline_policy

    path = Path(run)
    if not path.exists():
        return str(run)
    return path if (path / "checkpoints").is_dir() else pipeline_policy(path) or path


def _stage_dirs(run: Path) -> list[Path]:
    return (
        sorted(
            (p for p in run.iterdir() if p.is_dir() and re.fullmatch(r"\d+-.+", p.name)),
            key=lambda p: int(p.name.split("-", 1)[0]),
        )
        if run.is_dir()
        else []
    )


def adapter_summary(target) -> dict | None:
    """How far the served adapter is from zero (a LoRA adapter whose B matrices are all zero
    is exactly its base: e.g. a pipeline whose stages never took an update)."""
    from safetensors.torch import load_file

    from practicum.serve.loading import resolve_target

    try:
        t = resolve_target(target)
    except Exception:  # noqa: BLE001  (serve reports it; this is only a note)
        return None
    path = t.policy_dir / "adapter_model.safetensors" if t.policy_dir else None
    if path is None or not path.is_file():
        return None
    tensors = load_file(str(path))
    b = [v for k, v in tensors.items() if "lora_B" in k]
    return {
        "policy_dir": str(t.policy_dir),
        "step": t.step,
        "lora_b_max_abs": max(float(v.abs().max()) for v in b) if b else None,
    }


def run_config(run: str | Path, default: str):
    """The run's own config.yaml (what it held out), else configs/<default>."""
    from practicum.config import load_config

    path = Path(run) / "config.yaml"
    return load_config(path if path.is_file() else ROOT / "configs" / default)


def mle_held_out(run) -> list[str]:
    return list(run_config(run, "mle.yaml").task.options["held_out"])


def swe_held_out(run) -> list:
    """The held-out `SweInstance`s of the run's config (package, tiers, eval_size)."""
    from practicum.envs.registry import parse_options
    from practicum.envs.swe.env import split_instances
    from practicum.envs.swe.instance import load_instances
    from practicum.tasks.swe import bundled_instances_path

    opts = parse_options("swe", run_config(run, "swe.yaml").task.options)
    return split_instances(load_instances(opts.instances or bundled_instances_path()), opts)[1]


# -- practicum's own held-out results ------------------------------------------------------------


def eval_files(run: Path) -> tuple[Path, Path] | None:
    """(held-out evaluation of the untrained policy, the final one) of a run or pipeline."""

    def ordered(stage: Path) -> list[Path]:
        rft = [stage / "rft" / "eval" / f"{k}.json" for k in ("before", "after")]
        return [p for p in rft if p.is_file()] + sorted((stage / "eval").glob("step_*.json"))

    stages = _stage_dirs(run)
    files = [f for s in stages for f in ordered(s)] if stages else ordered(run)
    return (files[0], files[-1]) if len(files) >= 2 else None


def practicum_rows(agent_kind: str, run: Path, tasks: list[str]) -> list[dict]:
    """practicum's own held-out episodes of `run` on `tasks`, as records (policy base: the
    evaluation before training; trained: the last one)."""
    found = eval_files(run)
    if found is None:
        return []
    out = []
    for policy, path in zip(POLICIES, found):
        data = json.loads(path.read_text())
        eps = [e for e in data["episodes"] if re.sub(r"#\d+$", "", e["task_id"]) in tasks]
        # The evaluation's mean sampled tokens per episode, when all its episodes are kept.
        tokens = (
            {"completion_tokens": data.get("sampled_tokens_mean")}
            if len(eps) == data.get("tasks")
            else None
        )
        for e in eps:
            m = e.get("metrics") or {}
            out.append(
                {
                    "agent": agent_kind,
                    "policy": policy,
                    "task": e["task_id"],
                    "source": str(path),
                    "solved": bool(e["solved"]),
                    "score": float(m.get("score_credit", e["reward"]))
                    if agent_kind == "practicum-mle"
                    else float(e["reward"]),
                    "reward": float(e["reward"]),
                    "seconds": None,
                    "steps": len(e.get("turns") or []),
                    "malformed": float(m.get("malformed", m.get("malformed_turns", 0.0))),
                    "output": bool(m.get("valid"))
                    if agent_kind == "practicum-mle"
                    else bool(m.get("patch_lines", 0.0)),
                    "tokens": tokens,
                }
            )
    return out


# -- the served endpoint -------------------------------------------------------------------------


class Server:
    """`practicum serve TARGET --name policy` as a subprocess on a free port."""

    def __init__(self, target, dtype: str, log: Path):
        from practicum.serve.http import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        }
        self.log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "practicum.cli",
                "serve",
                str(target),
                "--port",
                str(self.port),
                "--dtype",
                dtype,
                "--name",
                SERVED_NAME,
            ],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"practicum serve exited: {self.log.read_text()[-2000:]}")
            try:
                self.usage()
                return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("practicum serve did not come up in 600 s")
            time.sleep(0.5)

    def usage(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/health", timeout=5) as r:
            return json.loads(r.read())["usage"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT: uvicorn shuts down, the engine stops
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __exit__(self, *exc) -> None:
        self.close()


def model_id(policy: str) -> str:
    return SERVED_NAME if policy == "trained" else f"{SERVED_NAME}-base"


def usage_delta(before: dict, after: dict, model: str) -> dict:
    """Tokens served to `model` between two /health readings."""
    a, b = after.get(model, {}), before.get(model, {})
    return {k: a.get(k, 0) - b.get(k, 0) for k in ("samples", "prompt_tokens", "completion_tokens")}


# -- one agent on one task -----------------------------------------------------------------------


def aide_task(args, server: Server, policy: str, comp_id: str, work: Path) -> dict:
    """AIDE on one held-out competition, graded by practicum."""
    from practicum.envs.mle.competitions.loading import load_competition
    from practicum.envs.mle.credit.rewards import normalise_score, orient_score, usable_anchors
    from practicum.envs.mle.episode_data import load_competition_data
    from practicum.serve.agents import agent_python, run_aide

    before = server.usage()
    run = run_aide(
        server.url + "/v1",
        model_id(policy),
        comp_id,
        work,
        steps=args.aide_steps,
        python=agent_python("aide"),
        exec_timeout=args.aide_exec_seconds,
        timeout=args.aide_seconds,
    )
    tokens = usage_delta(before, server.usage(), model_id(policy))
    report = run.report or {}
    valid, score = bool(report.get("valid")), report.get("score")
    credit = 0.0
    if valid:  # the MLE env's score credit (suite option score_scale: leaderboard)
        data = load_competition_data(load_competition(comp_id), None)
        credit = (
            normalise_score(score, data.anchors)
            if usable_anchors(data.anchors)
            else orient_score(score, data.comp.lower_is_better, "inverse", 3.0)
        )
    nodes = [
        {
            "plan": (n.get("plan") or "")[:400],
            "code": (n.get("code") or "")[:800],
            "analysis": (n.get("analysis") or "")[:300],
            "is_buggy": n.get("is_buggy"),
            "metric": n.get("metric"),
            "exc_type": n.get("exc_type"),
        }
        for n in run.journal
    ]
    return {
        "solved": valid,
        "score": credit,
        "raw_score": score,
        "reward": None,
        "seconds": run.seconds,
        "steps": len(run.journal),
        # replies AIDE could not extract a plan and code block from (it retries each)
        "malformed": len(re.findall(r"extraction (?:attempt )?failed", run.log_tail)),
        "output": run.submission is not None,
        "tokens": tokens,
        "returncode": run.returncode,
        "timed_out": run.timed_out,
        "buggy_nodes": sum(1 for n in run.journal if n["is_buggy"]),
        "exceptions": [n["exc_type"] for n in run.journal if n["exc_type"]],
        "grade": report or None,
        "nodes": nodes,
        "log_tail": run.log_tail[-1500:],
    }


def model_turns(messages: list[dict]) -> list[dict]:
    """mini-swe-agent's model replies in a trajectory: assistant messages, and the replies it
    rejected (a FormatError message keeps the raw response in its `extra`)."""
    turns = []
    for m in messages:
        extra = m.get("extra") or {}
        if m.get("role") == "assistant":
            turns.append(
                {
                    "text": _text(m.get("content")),
                    "malformed": False,
                    "commands": [
                        c.get("function", {}).get("arguments", "")
                        for c in m.get("tool_calls") or []
                    ],
                }
            )
        elif extra.get("interrupt_type") == "FormatError":
            response = extra.get("response")
            choice = (response.get("choices") or [{}])[0] if isinstance(response, dict) else {}
            turns.append(
                {
                    "text": _text((choice.get("message") or {}).get("content"))
                    or str(response or ""),
                    "malformed": True,
                    "commands": [],
                    "finish_reason": choice.get("finish_reason"),
                }
            )
    return turns


def mini_task(args, server: Server, policy: str, instance, work: Path) -> dict:
    """mini-swe-agent on one held-out SWE task, graded by practicum."""
    from practicum.serve.agents import agent_python, run_mini_swe_agent_on_task

    before = server.usage()
    run, verdict = run_mini_swe_agent_on_task(
        server.url + "/v1",
        model_id(policy),
        instance,
        work,
        step_limit=args.mini_steps,
        python=agent_python("mini"),
        timeout=args.mini_seconds,
        max_tokens=args.mini_max_tokens,
    )
    tokens = usage_delta(before, server.usage(), model_id(policy))
    messages = (
        json.loads(run.trajectory.read_text()).get("messages", [])
        if run.trajectory.is_file()
        else []
    )
    turns = model_turns(messages)
    return {
        "solved": bool(verdict.resolved),
        "score": 1.0 if verdict.resolved else 0.0,
        "reward": 1.0 if verdict.resolved else 0.0,
        "seconds": run.seconds,
        "steps": len(turns),
        "malformed": sum(t["malformed"] for t in turns),
        "cut_at_token_limit": sum(t.get("finish_reason") == "length" for t in turns),
        "output": bool((run.patch or "").strip()),
        "tokens": tokens,
        "returncode": run.returncode,
        "timed_out": run.timed_out,
        "exit_status": run.exit_status,
        "commands": [c[:300] for t in turns for c in t["commands"]],
        "replies": [t["text"][:400] for t in turns],
        "patch": (run.patch or "")[:2000],
        "verdict": {
            "resolved": verdict.resolved,
            "reason": verdict.reason,
            "patch_applied": verdict.patch_applied,
            "fail_to_pass": list(verdict.fail_to_pass),
            "pass_to_pass": list(verdict.pass_to_pass),
        },
        "log_tail": run.log_tail[-1500:],
    }


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


# -- table ---------------------------------------------------------------------------------------


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def aggregate(records: list[dict]) -> list[dict]:
    """One row per (agent, policy): tasks, solved (valid submission / resolved) rate, mean
    score (MLE: score credit; SWE: reward), wall seconds, tokens served, steps, malformed turns
    and outputs produced per task; rows in AGENTS x POLICIES order, practicum's own after the
    agent of the same suite."""
    order = ["aide", "practicum-mle", "mini", "practicum-swe"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["agent"], r["policy"]), []).append(r)
    rows = []
    for (agent, policy), rs in sorted(
        groups.items(),
        key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order else len(order), kv[0][1]),
    ):
        tok = [r["tokens"] for r in rs if r.get("tokens")]
        rows.append(
            {
                "agent": agent,
                "scaffold": SCAFFOLD.get(agent, agent),
                "suite": SUITE.get(agent),
                "policy": policy,
                "tasks": len(rs),
                "task_ids": sorted({re.sub(r"#\d+$", "", r["task"]) for r in rs}),
                "solved_rate": _mean([float(r["solved"]) for r in rs]),
                "score_mean": _mean([r["score"] for r in rs]),
                "seconds_per_task": _mean([r.get("seconds") for r in rs]),
                "completion_tokens_per_task": _mean([t.get("completion_tokens") for t in tok]),
                "prompt_tokens_per_task": _mean([t.get("prompt_tokens") for t in tok]),
                "steps_per_task": _mean([r.get("steps") for r in rs]),
                "malformed_per_task": _mean([r.get("malformed") for r in rs]),
                "output_rate": _mean([float(bool(r.get("output"))) for r in rs]),
                "timed_out": sum(1 for r in rs if r.get("timed_out")),
            }
        )
    return rows


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: list[dict]) -> str:
    """A rich table of `aggregate`'s rows; returns it as plain text too."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title="Base vs RL-trained policy under the same scaffold, held-out tasks "
        "(SmolLM2-135M-Instruct + LoRA, fp32, CPU)"
    )
    for col in (
        "scaffold",
        "suite",
        "policy",
        "tasks",
        "solved",
        "score",
        "s/task",
        "sampled tok/task",
        "prompt tok/task",
        "steps/task",
        "malformed/task",
        "output made",
    ):
        table.add_column(col, justify="left" if col in ("scaffold", "suite", "policy") else "right")
    for r in rows:
        table.add_row(
            r["scaffold"],
            r["suite"],
            r["policy"],
            str(r["tasks"]),
            _fmt(r["solved_rate"], ".2f"),
            _fmt(r["score_mean"], "+.3f"),
            _fmt(r["seconds_per_task"], ".0f"),
            _fmt(r["completion_tokens_per_task"], ".0f"),
            _fmt(r["prompt_tokens_per_task"], ".0f"),
            _fmt(r["steps_per_task"], ".1f"),
            _fmt(r["malformed_per_task"], ".1f"),
            _fmt(r["output_rate"], ".2f"),
        )
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, suite, title in (
        (axes[0], "mle", "MLE held-out competitions: valid submission rate, score credit"),
        (axes[1], "swe", "SWE held-out tasks: resolved rate"),
    ):
        mine = [r for r in rows if r["suite"] == suite]
        labels = [
            r["scaffold"].split(" (")[0].replace("practicum ", "practicum\n") + "\n" + r["policy"]
            for r in mine
        ]
        xs = list(range(len(mine)))
        colors = ["C0" if r["policy"] == "base" else "C1" for r in mine]
        solved = ax.bar(
            [x - 0.2 for x in xs], [r["solved_rate"] or 0 for r in mine], 0.4, color=colors
        )
        ax.bar_label(solved, fmt="%.2f", fontsize=7)
        handles = [
            Patch(color="C0", label="solved rate, base"),
            Patch(color="C1", label="solved rate, trained"),
        ]
        if suite == "mle":
            credit = ax.bar(
                [x + 0.2 for x in xs],
                [r["score_mean"] or 0 for r in mine],
                0.4,
                color="C2",
                alpha=0.7,
            )
            ax.bar_label(credit, fmt="%.2f", fontsize=7)
            handles.append(Patch(color="C2", alpha=0.7, label="mean score credit"))
        ax.legend(handles=handles, fontsize=7, loc="upper left")
        ax.set_xticks(xs, labels, fontsize=7)
        ax.set_xlim(-0.6, max(len(mine), 2) - 0.4)
        ax.set_ylim(min([0.0] + [r["score_mean"] or 0 for r in mine]), 1.15)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- main ----------------------------------------------------------------------------------------


def budget(args, agent: str) -> dict:
    return (
        {
            "steps": args.aide_steps,
            "seconds": args.aide_seconds,
            "exec_seconds": args.aide_exec_seconds,
        }
        if agent == "aide"
        else {
            "steps": args.mini_steps,
            "seconds": args.mini_seconds,
            "max_tokens": args.mini_max_tokens,
        }
    )


def run_agent(args, agent: str, run: str, runs_dir: Path) -> None:
    """Every (policy, held-out task) of one agent not stored yet, against one server."""
    target = serve_target(run)
    if agent == "aide":
        tasks = [(c, c) for c in mle_held_out(run)][: args.tasks]
    else:
        tasks = [(i.instance_id, i) for i in swe_held_out(run)][: args.tasks]
    todo = []
    for policy in args.policies:
        for task_id, task in tasks:
            path = runs_dir / f"{agent}_{policy}_{task_id.replace('/', '_')}.json"
            if path.is_file():
                old = json.loads(path.read_text())
                if old.get("target") == str(target) and old.get("budget") == budget(args, agent):
                    continue
            todo.append((policy, task_id, task, path))
    if not todo:
        return
    adapter = adapter_summary(target)
    print(f"{agent}: {len(todo)} runs against practicum serve {target} ({adapter})", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix=f"agents-baseline-{agent}-") as tmp,
        Server(target, args.dtype, Path(tmp) / "serve.log") as server,
    ):
        for policy, task_id, task, path in todo:
            work = Path(tmp) / f"{policy}-{task_id.replace('/', '_')}"
            started = time.time()
            fn = aide_task if agent == "aide" else mini_task
            result = fn(args, server, policy, task, work)
            record = {
                "agent": agent,
                "policy": policy,
                "task": task_id,
                "model": model_id(policy),
                "target": str(target),
                "run": str(run),
                "adapter": adapter,
                "budget": budget(args, agent),
                "started": started,
                **result,
            }
            path.write_text(json.dumps(record, indent=1))
            print(
                f"  {agent} {policy:7s} {task_id:40s} solved={record['solved']!s:5s} "
                f"score={record['score']:+.3f} steps={record['steps']} "
                f"output={record['output']} {record['seconds']:.0f} s "
                f"{record['tokens']['completion_tokens']} tok",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--agents", nargs="+", choices=AGENTS, default=list(AGENTS))
    p.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    p.add_argument(
        "--mle-run",
        default=str(ROOT / "runs" / "mle"),
        help="trained MLE run (folder with checkpoints/), checkpoint or policy",
    )
    p.add_argument(
        "--swe-run",
        default=str(ROOT / "runs" / "swe"),
        help="trained SWE run or stage pipeline, checkpoint, policy, or a plain "
        "model (then 'trained' is the base model)",
    )
    p.add_argument("--tasks", type=int, default=None, help="first N held-out tasks per agent")
    p.add_argument("--aide-steps", type=int, default=1, help="AIDE steps per competition")
    p.add_argument("--aide-seconds", type=float, default=600, help="AIDE time limit per task")
    p.add_argument(
        "--aide-exec-seconds", type=int, default=60, help="limit of one run of AIDE's script"
    )
    p.add_argument("--mini-steps", type=int, default=5, help="mini-swe-agent step limit")
    p.add_argument(
        "--mini-seconds", type=float, default=300, help="mini-swe-agent time limit per task"
    )
    p.add_argument(
        "--mini-max-tokens", type=int, default=256, help="tokens per mini-swe-agent reply"
    )
    p.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--report", action="store_true", help="only rebuild the table from records")
    args = p.parse_args()
    out = Path(args.out)
    runs_dir = out / "agents_baseline_runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    state = machine_state()
    if not args.report:
        for agent in args.agents:
            run_agent(args, agent, args.mle_run if agent == "aide" else args.swe_run, runs_dir)
    records = [
        json.loads(f.read_text())
        for f in sorted(runs_dir.glob("*.json"))
        if not f.name.startswith("practicum-")
    ]
    # practicum's own held-out rows for the runs and tasks the agents were run on
    for kind, agent in (("practicum-mle", "aide"), ("practicum-swe", "mini")):
        mine = [r for r in records if r["agent"] == agent]
        run = Path(mine[0]["run"]) if mine else None
        path = runs_dir / f"{kind}.json"
        if run is not None and run.is_dir():
            rows = practicum_rows(kind, run, sorted({r["task"] for r in mine}))
            if rows:
                path.write_text(json.dumps(rows, indent=1))
        if path.is_file():
            records += json.loads(path.read_text())
    if not records:
        raise SystemExit(f"no stored runs under {runs_dir}")
    rows = aggregate(records)
    text = print_table(rows)
    (out / "agents_baseline.json").write_text(
        json.dumps(
            {
                "machine": state,
                "args": vars(args),
                "table": rows,
                "table_text": text,
                "runs": records,
            },
            indent=1,
        )
    )
    plot(rows, out / "agents_baseline.png")
    print(f"wrote {out / 'agents_baseline.json'} and {out / 'agents_baseline.png'}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
