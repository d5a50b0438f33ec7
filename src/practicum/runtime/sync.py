"""The synchronous GRPO loop: sample a group of episodes per task, score, train, repeat."""

from __future__ import annotations

import threading
import time

import torch

from practicum.algo.filters import informative_groups
from practicum.batch import group_index
from practicum.episode import Episode
from practicum.runtime.progress import TrainProgress
from practicum.runtime.session import Session


def informative(episodes: list[Episode]) -> list[Episode]:
    """DAPO dynamic sampling: keep only groups whose rewards are not all equal."""
    if not episodes:
        return []
    keep = informative_groups(torch.tensor([e.reward for e in episodes]), group_index(episodes))
    return [e for e, k in zip(episodes, keep.tolist()) if k]


def collect_batch(s: Session, step: int) -> list[Episode]:
    """Groups for this step; with dynamic sampling, refill until enough informative groups."""
    cfg = s.cfg
    want = cfg.rollout.tasks_per_step
    batch: list[Episode] = []
    for round_ in range(1 + (cfg.algo.max_refill_rounds if cfg.algo.dynamic_sampling else 0)):
        n_groups = len({e.group_id for e in batch})
        if n_groups >= want:
            break
        tasks = s.cursor.take(want - n_groups)
        expanded = [t for t in tasks for _ in range(cfg.rollout.group_size)]
        groups = [f"s{step}r{round_}/{t.task_id}" for t in tasks for _ in range(cfg.rollout.group_size)]
        eps = s.rollout(expanded, groups, seed=(cfg.run.seed * 100_003 + step) * 10 + round_)
        for e in eps:
            e.info["step"] = step
        s.store.append(eps)  # persisted before it is trained on
        batch += informative(eps) if cfg.algo.dynamic_sampling else eps
    return batch


def pending_batch(s: Session) -> tuple[list[Episode], int]:
    """Episodes already on disk but not yet trained on (a crash after sampling): reuse them."""
    eps = s.store.read(s.consumed)
    if not eps:
        return [], 0
    first = eps[0].info.get("step")
    eps = [e for e in eps if e.info.get("step") == first]  # one step's batch at a time
    return eps, len(eps)


def rollout_metrics(episodes: list[Episode], prefix: str = "") -> dict[str, float]:
    n = max(1, len(episodes))
    return {
        f"{prefix}reward_mean": sum(e.reward for e in episodes) / n,
        f"{prefix}success_rate": sum(e.reward >= 1.0 for e in episodes) / n,
        f"{prefix}turns_mean": sum(len(e.turns) for e in episodes) / n,
        f"{prefix}sampled_tokens_mean": sum(e.num_sampled for e in episodes) / n,
        f"{prefix}failures": float(sum(e.failure is not None for e in episodes)),
        f"{prefix}overlong": float(sum(e.overlong for e in episodes)),
        f"{prefix}env_seconds": sum(e.env_duration for e in episodes),
    }


def share_policy_with_envs(s: Session) -> None:
    """Environments that run the frozen base model (the MLE `policy_base` instrumenter) use
    the live policy with its adapter disabled instead of loading a second copy. Safe here:
    env steps never overlap generation or training in the lockstep loop, so a lock private to
    the environments serialises every use of the policy."""
    bind = getattr(s.suite.make_env, "bind_policy", None)
    if bind is not None and getattr(getattr(s.policy, "cfg", None), "lora", False):
        bind(s.policy, threading.Lock())


def run_sync(s: Session, progress: bool = True) -> dict:
    cfg = s.cfg
    started = time.time()
    share_policy_with_envs(s)
    if s.learner.step == 0 and not (s.run_dir / "eval" / "step_000000.json").exists():
        before = s.evaluate("step_000000")
        s.metrics.log(0, {f"eval/{k}": v for k, v in before.items() if isinstance(v, (int, float))})
    with TrainProgress(cfg.train.steps, s.learner.step, enabled=progress) as bar:
        while s.learner.step < cfg.train.steps:
            step = s.learner.step
            t0 = time.perf_counter()
            pending, n_pending = pending_batch(s)
            if pending:
                sampled = pending
                batch = informative(pending) if cfg.algo.dynamic_sampling else pending
                added = n_pending
            else:
                before_len = len(s.store)
                batch = collect_batch(s, step)
                sampled = s.store.read(before_len)
                added = len(s.store) - before_len
            rollout_s = time.perf_counter() - t0
            metrics = rollout_metrics(sampled)
            metrics.update(s.learner.train_step(batch) if batch else {"skipped": 1.0})
            if not batch:
                s.learner.step += 1  # nothing informative: count the step, keep the weights
            s.consumed += added
            metrics.update({"rollout_seconds": rollout_s, "batch_episodes": float(len(batch)),
                            "step_seconds": time.perf_counter() - t0,
                            "policy_version": float(s.policy.version)})
            if cfg.eval.every and s.learner.step % cfg.eval.every == 0 \
                    and s.learner.step < cfg.train.steps:
                ev = s.evaluate(f"step_{s.learner.step:06d}")
                metrics.update({f"eval/{k}": v for k, v in ev.items() if isinstance(v, (int, float))})
            s.metrics.log(s.learner.step, metrics)
            if s.learner.step % cfg.train.checkpoint_every == 0:
                s.checkpoint()
            bar.update(s.learner.step, metrics)
    return s.finish(started)
