"""A pipeline of training stages run in order by `practicum train` (config `stages:`).

arXiv 2508.03501 trains its SWE agent in stages: rejection fine-tuning on the base model's own
successes, RL (DAPO) from that policy, a curriculum refresh that drops tasks the policy always
or never solves, then RL again with more turns and a longer context. Here each stage is

    {name, kind: sft | rft | rl, overrides: {dotted.key: value}, curriculum_refresh: bool}

(sft: a warm start on demonstrations or a teacher's trajectories, `practicum.runtime.sft`)

run in RUN/<index>-<name>/ with the run's config plus its overrides, starting from the
previous stage's policy (`model.init`). A finished stage leaves RUN/<i>-<name>/stage.json and
policy/; a killed pipeline re-run with the same command skips finished stages and resumes the
interrupted one from its own checkpoint (rft resumes sampling, rl its last checkpoint).
RUN/report.json and report.md give the held-out solve rate before and after every stage.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from pydantic import ValidationError

from practicum.algo.curriculum import SolveRateTracker
from practicum.config import Config, StageConfig, set_dotted
from practicum.envs.registry import parse_options
from practicum.errors import ConfigError, TrainingError
from practicum.report import solved
from practicum.runtime.train import run_training

_EVAL_KEYS = ("task", "rollout", "sampling", "eval")
"""Sections an evaluation depends on: equal across two stages, the policy a stage starts from
has already been evaluated under the same conditions, so its result is reused."""


def stage_config(cfg: Config, index: int, init: str | None) -> Config:
    """The config of stage `index`: the run's, its overrides applied, its own run folder."""
    stage = cfg.stages[index]
    tree = cfg.model_dump(mode="json")
    tree["stages"] = []
    for key, value in stage.overrides.items():
        if key.split(".")[0] in ("run", "stages"):
            raise ConfigError(
                f"config error at stages[{index}].overrides.{key}: a stage "
                f"cannot change the run folder or the stage list"
            )
        set_dotted(tree, key, value)
    tree["run"].update(out_dir=str(cfg.run_dir), name=f"{index}-{stage.name}", resume=True)
    if init is not None:
        tree["model"]["init"] = init
    try:
        sub = Config.model_validate(tree)
    except ValidationError as err:  # pydantic's message names the key inside the stage's config
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(
            f"config error at stages[{index}].overrides ({where}): {first['msg']}"
        ) from None
    try:
        options = parse_options(sub.task.name, sub.task.options)
    except ConfigError as err:
        raise ConfigError(f"stages[{index}].overrides: {err}") from None
    sub.task.options = options.model_dump(mode="json")
    return sub


def run_stages(cfg: Config, progress: bool = True) -> dict:
    """Run (or resume) every stage in order; returns and writes the pipeline report."""
    names = [s.name for s in cfg.stages]
    if len(set(names)) != len(names):
        raise ConfigError(f"config error at stages: stage names repeat ({names})")
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    init, prev = cfg.model.init, None
    results = []
    for i, stage in enumerate(cfg.stages):
        sub = stage_config(cfg, i, init)
        marker = sub.run_dir / "stage.json"
        if marker.exists():
            result = _paths(json.loads(marker.read_text()), lambda p: _resolve(p, cfg.run_dir))
        else:
            result = _run_stage(cfg, i, stage, sub, prev, progress)
            marker.write_text(
                json.dumps(_paths(result, lambda p: _stored(p, cfg.run_dir)), indent=1)
            )
        results.append(result)
        init, prev = result["policy"], (sub, result)
    report = {
        "run_dir": str(cfg.run_dir),
        "stages": results,
        "wall_seconds_this_call": time.time() - started,
    }
    report["table"] = _table(results)
    on_disk = {
        **report,
        "run_dir": ".",
        "stages": [_paths(r, lambda p: _stored(p, cfg.run_dir)) for r in results],
    }
    (cfg.run_dir / "report.json").write_text(json.dumps(on_disk, indent=1))
    (cfg.run_dir / "report.md").write_text(report["table"] + "\n")
    return report


def pipeline_policy(run_dir: Path) -> Path | None:
    """The policy of a pipeline folder's last finished stage that has one (what `practicum
    serve RUN` serves for a run with `stages:`), or None if no stage has finished."""
    markers = [
        m for m in run_dir.glob("*-*/stage.json") if m.parent.name.split("-", 1)[0].isdigit()
    ]
    for marker in sorted(markers, key=lambda m: int(m.parent.name.split("-", 1)[0]), reverse=True):
        policy = json.loads(marker.read_text()).get("policy")
        if policy:
            return Path(_resolve(policy, run_dir))
    return None


def _paths(result: dict, convert) -> dict:
    """`result` with its path fields ("run_dir", "policy") passed through `convert`."""
    return {**result, **{k: convert(result[k]) for k in ("run_dir", "policy") if result.get(k)}}


def _stored(path: str, run_dir: Path) -> str:
    """A path as stage.json and report.json record it: relative to the pipeline folder when
    inside it, so the pipeline reads the same from any working directory and when moved."""
    try:
        return str(Path(path).resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def _resolve(stored: str, run_dir: Path) -> str:
    """Inverse of `_stored`. Markers written before paths were stored that way hold paths
    relative to the working directory of training (`runs/swe/0-rft/rft/policy`): the longest
    tail of such a path that exists inside `run_dir` is taken."""
    path = Path(stored)
    if path.is_absolute():
        return stored
    for i in range(len(path.parts)):
        inside = run_dir.joinpath(*path.parts[i:])
        if inside.exists():
            return str(inside)
    return str(run_dir / path)


def _run_stage(
    cfg: Config,
    index: int,
    stage: StageConfig,
    sub: Config,
    prev: tuple[Config, dict] | None,
    progress: bool,
) -> dict:
    t0 = time.time()
    keep = refresh(cfg, index, sub) if stage.curriculum_refresh else None
    if stage.kind in ("rft", "sft"):
        if stage.kind == "rft":
            from practicum.runtime.rft import run_rft as run
        else:
            from practicum.runtime.sft import run_sft as run

        summary = run(sub, progress)
        policy = Path(summary["policy"])
        episodes = summary["sampled"]
        extra = {
            "kept": summary["kept"],
            "tasks_with_a_kept_episode": summary["tasks_with_a_kept_episode"],
        }
    else:
        if prev is not None and _same_eval(prev[0], sub):
            _reuse_eval(prev[1], sub.run_dir)
        try:
            summary = run_training(sub, progress, keep)
            policy = _final_policy(sub.run_dir)
            stopped = None
        except TrainingError as err:  # e.g. no group ever had a reward signal (DAPO filters)
            from practicum.learner import latest_checkpoint

            summary, stopped = _stopped_summary(sub, prev), str(err)
            policy = (
                _final_policy(sub.run_dir)
                if latest_checkpoint(sub.run_dir / "checkpoints")
                else Path(sub.model.init)
                if sub.model.init
                else None
            )
        episodes = summary["episodes"]
        extra = {
            "steps": summary["steps"],
            "skipped_batches": summary["skipped_batches"],
            "stopped": stopped,
        }
    before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
    return {
        "index": index,
        "name": stage.name,
        "kind": stage.kind,
        "run_dir": str(sub.run_dir),
        "policy": str(policy) if policy else None,
        "episodes": episodes,
        "minutes": (time.time() - t0) / 60,
        "held_out_before": before.get("solved_rate"),
        "held_out_after": after.get("solved_rate"),
        "held_out_tasks": after.get("tasks"),
        "train_tasks": keep if keep is not None else None,
        **extra,
    }


def refresh(cfg: Config, index: int, sub: Config) -> list[str] | None:
    """Training task ids kept after the curriculum refresh before stage `index`: a task with
    at least curriculum.min_attempts episodes in earlier stages is dropped if none solved it or
    more than max_solve_rate did. None (keep all) if that would drop every task."""
    from practicum.store import EpisodeStore

    tracker = SolveRateTracker()
    for j in range(index):
        folder = cfg.run_dir / f"{j}-{cfg.stages[j].name}"
        for path in (folder / "episodes.jsonl", folder / "rft" / "episodes.jsonl"):
            # (sft episodes are acted by a demonstrator or teacher: not the policy's record)
            if path.exists():
                for e in EpisodeStore(path).read():
                    tracker.update(e.task_id, solved(e, sub.curriculum.solved_reward))
    from practicum.envs.registry import SuiteContext, build_suite

    tasks = [
        t.task_id
        for t in build_suite(
            sub.task.name, sub.task.options, SuiteContext(sub.run.seed)
        ).train_tasks
    ]
    cur = sub.curriculum
    kept = [t for t in tasks if tracker.keep(t, cur.max_solve_rate, cur.min_attempts)]
    return kept if kept else None


def _stopped_summary(sub: Config, prev: tuple[Config, dict] | None) -> dict:
    """What an RL stage that stopped early did: its episodes; no update took place after the
    last checkpoint, so held-out 'after' is its step-0 evaluation."""
    from practicum.store import EpisodeStore

    step0 = sub.run_dir / "eval" / "step_000000.json"
    ev = json.loads(step0.read_text()) if step0.exists() else None
    steps = 0
    metrics = sub.run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            steps = max(steps, int(json.loads(line).get("step", 0)))
    return {
        "episodes": len(EpisodeStore(sub.run_dir / "episodes.jsonl")),
        "steps": steps,
        "skipped_batches": None,
        "eval_before": ev,
        "eval_after": ev if steps == 0 else None,
    }


def _same_eval(a: Config, b: Config) -> bool:
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    return all(da[k] == db[k] for k in _EVAL_KEYS)


def _reuse_eval(prev: dict, run_dir: Path) -> None:
    """Copy the previous stage's final held-out evaluation as this stage's step-0 one."""
    prev_dir = Path(prev["run_dir"])
    if prev["kind"] in ("rft", "sft"):
        evals = sorted((prev_dir / prev["kind"] / "eval").glob("after.json"))
    else:
        evals = sorted((prev_dir / "eval").glob("step_*.json"))
    target = run_dir / "eval" / "step_000000.json"
    if evals and not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(evals[-1].read_text())
        data["label"] = "step_000000"
        data["reused_from"] = str(evals[-1])
        target.write_text(json.dumps(data, indent=1))


def _final_policy(run_dir: Path) -> Path:
    """Copy the last checkpoint's policy to RUN/<stage>/policy (checkpoints get pruned)."""
    from practicum.learner import latest_checkpoint

    dest = run_dir / "policy"
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        raise ConfigError(f"stage {run_dir.name} finished without a checkpoint")
    tmp = run_dir / ".policy_tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(ckpt / "policy", tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def _table(results: list[dict]) -> str:
    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [
        "| stage | kind | held-out solved before | after | episodes | minutes |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['index']}-{r['name']} | {r['kind']} | {pct(r['held_out_before'])} "
            f"| {pct(r['held_out_after'])} | {r['episodes']} | {r['minutes']:.1f} |"
        )
    return "\n".join(lines)
