"""`practicum rft CONFIG`: rejection fine-tuning, the first stage of arXiv 2508.03501.

    1. sample rft.samples_per_task episodes of every training task (rft.tasks of them) from the
       current policy (model.init, or the pretrained model), stored as they finish;
    2. keep the episodes that solved their task, ended normally and were not cut by a length
       limit (`algo.rft.rft_keep`; with algo.mask_overlong, as RL does);
    3. SFT on the kept episodes' policy tokens only, malformed turns masked
       (`algo.rft.rft_mask`, `rft_loss`), rft.epochs passes of rft.batch_size rows per update:
       each update is one `Learner.train_step` with the cross-entropy objective, so SFT runs
       wherever the learner runs (one process, a Ray actor, sharded ranks);
    4. save the adapter to RUN/rft/policy, evaluate held-out before and after.

Then RL starts from it: `practicum train CONFIG model.init=RUN/rft/policy`. Everything goes to
RUN/rft/ (episodes.jsonl, metrics.jsonl, eval/, policy/, summary.json); a killed run resumes
sampling where the store ends, and a finished one is not redone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from practicum.algo.rft import rft_keep
from practicum.config import Config
from practicum.episode import Episode
from practicum.finetune import finetune, stage_config
from practicum.report import solved
from practicum.runtime.progress import TrainProgress, counting
from practicum.runtime.session import Session, open_session


def rft_config(cfg: Config) -> Config:
    return stage_config(cfg, "rft", cfg.rft)


def run_rft(cfg: Config, progress: bool = True) -> dict:
    sub = rft_config(cfg)
    if (finished := finished_summary(sub.run_dir)) is not None:
        return finished
    started = time.time()
    s = open_session(sub)
    try:
        before = stored_eval(sub.run_dir, "before") or evaluate(s, "before rft", progress)
        episodes = sample(s, progress)
        kept, losses, after = keep_and_finetune(s, episodes, cfg.rft, "rft", before, progress)
    finally:
        s.close()
    per_task: dict[str, int] = {}
    for e in kept:
        per_task[e.task_id] = per_task.get(e.task_id, 0) + 1
    summary = {
        "run_dir": str(sub.run_dir),
        "policy": str(sub.run_dir / "policy"),
        "sampled": len(episodes),
        "kept": len(kept),
        "tasks": len({e.task_id for e in episodes}),
        "tasks_with_a_kept_episode": len(per_task),
        "sft_updates": len(losses),
        "sft_loss_first": losses[0] if losses else None,
        "sft_loss_last": losses[-1] if losses else None,
        "eval_before": before,
        "eval_after": after,
        "wall_seconds": time.time() - started,
        "next": f"practicum train ... model.init={sub.run_dir / 'policy'}",
    }
    (sub.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def keep_and_finetune(
    s: Session, episodes: list[Episode], opts, stage: str, before: dict, progress: bool
) -> tuple[list[Episode], list[float], dict]:
    """The end of a warm-start stage (rft, sft): keep the episodes that solved their task and
    ended normally (overlong ones excluded as RL excludes them, algo.mask_overlong), fine-tune
    on them (`opts`: cfg.rft or cfg.sft), save RUN/<stage>/policy, publish it, and evaluate
    held-out again (or reuse `before` when nothing was kept). Returns (kept, losses, after)."""
    cfg = s.cfg
    kept = [
        e
        for e in episodes
        if rft_keep(
            solved(e, cfg.rft.min_reward),
            e.failure is not None,
            e.overlong and cfg.algo.mask_overlong,
        )
    ]
    losses = finetune(
        s.learner,
        kept,
        opts,
        cfg.run.seed,
        progress,
        s.run_dir,
        s.metrics.log,
        label="rft sft" if stage == "rft" else stage,
    )
    s.learner.save_policy(s.run_dir / "policy")
    s.publish()
    after = evaluate(s, f"after {stage}", progress) if kept else unchanged_eval(s.run_dir, before)
    return kept, losses, after


def evaluate(s: Session, when: str, progress: bool) -> dict:
    """The held-out evaluation `when` ("before rft": saved as eval/before.json), with its
    progress line on stdout and in RUN/progress.log."""
    t0 = time.perf_counter()
    bar = TrainProgress(0, enabled=progress, log_dir=s.run_dir)
    with bar.count(f"evaluating ({when})", len(s.eval_tasks)) as count:
        result = s.evaluate(when.split()[0], lambda e: count.advance())
    bar.evaluation(0, result, time.perf_counter() - t0, when)
    return result


def finished_summary(run_dir: Path) -> dict | None:
    """The summary of a warm-start stage (rft, sft) that already finished in `run_dir`
    (summary.json and policy/ both written): a rerun returns it instead of starting over."""
    done = run_dir / "summary.json"
    if done.exists() and (run_dir / "policy").exists():
        return json.loads(done.read_text())
    return None


def stored_eval(run_dir: Path, label: str) -> dict | None:
    """A held-out evaluation this run already wrote (a resumed run does not repeat it)."""
    path = run_dir / "eval" / f"{label}.json"
    if not path.exists():
        return None
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "episodes"}


def unchanged_eval(run_dir: Path, before: dict) -> dict:
    """Nothing was kept, so the adapter was saved untouched: 'after' is 'before' (greedy
    evaluation of the same weights), written without sampling the held-out tasks again."""
    data = json.loads((run_dir / "eval" / "before.json").read_text())
    data.update(label="after", reused_from="before (no episode kept: the policy is unchanged)")
    (run_dir / "eval" / "after.json").write_text(json.dumps(data, indent=1))
    return {**before, "label": "after"}


def sample(s: Session, progress: bool) -> list[Episode]:
    """k episodes of each task, in chunks of one batch; chunks already stored are reused."""
    r = s.cfg.rft
    tasks = s.suite.train_tasks[: r.tasks or None]
    items = [
        (t, f"rft/{i}/{t.task_id}", k)
        for i, t in enumerate(tasks)
        for k in range(r.samples_per_task)
    ]
    chunk = s.cfg.rollout.group_size * s.cfg.rollout.tasks_per_step
    episodes = list(s.store)
    rewards = [e.reward for e in episodes]

    def finished(e: Episode) -> None:
        rewards.append(e.reward)
        count.advance(info=f"reward {sum(rewards) / len(rewards):.3f}")

    with counting(
        "rft sample", len(items), len(episodes), enabled=progress, log_dir=s.run_dir
    ) as count:
        for start in range(len(episodes), len(items), chunk):
            eps = s.rollout(items[start : start + chunk], r.temperature, finished)
            s.store.append(eps)
            episodes += eps
    return episodes[: len(items)]
