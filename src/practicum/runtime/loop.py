"""The one training loop. Runtimes differ only in how a batch is produced (`BatchSource`):
`SyncBatches` samples groups in lockstep, `AsyncBatches` takes what free-running actors
finished. Evaluation, the update and weight publishing, the ledger, metrics, checkpoints and
resume are all here.

    evaluate before training (step 0)
    loop until train.steps:
        batch = source.next_batch()                    stored episodes, with store positions
        nothing to train on? record it, warn, count   (no step; too many in a row: error)
        rows built here (rl_batch) -> learner.train_step -> publish weights (version = step)
        source.after_update
        ledger.record(batch), curriculum.record(batch)
        evaluate / log / checkpoint every N steps
    final evaluation, checkpoint, plot, summary.json
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from practicum.episode import Episode
from practicum.errors import TrainingError
from practicum.report import episode_metrics, solved
from practicum.runtime.progress import TrainProgress

if TYPE_CHECKING:
    from practicum.runtime.session import Session

log = logging.getLogger(__name__)

Stored = list[tuple[int, Episode]]
"""(store position, episode) pairs."""


@dataclass
class Batch:
    trained: Stored
    """Episodes for the loss."""
    filtered: Stored = field(default_factory=list)
    """Consumed without training: zero-variance groups (dynamic sampling)."""
    dropped: Stored = field(default_factory=list)
    """Consumed without training: too stale, or left incomplete by a crash."""
    metrics: dict[str, float] = field(default_factory=dict)


class BatchSource(Protocol):
    def start(self) -> None: ...

    def next_batch(self) -> Batch: ...

    def after_update(self, version: int) -> None:
        """The sampler now holds policy version `version`."""
        ...

    def state(self) -> dict:
        """What a checkpoint must keep to resume this source."""
        ...

    def frozen(self) -> AbstractContextManager:
        """A block in which `state()` and the ledger agree (no episode finishes meanwhile)."""
        ...

    def stop(self) -> None: ...

    def summary(self) -> dict:
        """Run-level figures for summary.json."""
        ...


def train(s: Session, source: BatchSource, progress: bool = True) -> dict:
    """Train to cfg.train.steps; returns the run summary (also written to summary.json)."""
    cfg = s.cfg
    started = time.time()
    bar = TrainProgress(cfg.train.steps, s.learner.step, enabled=progress, log_dir=s.run_dir)
    if s.learner.step == 0 and not (s.run_dir / "eval" / "step_000000.json").exists():
        _log_eval(s, _evaluate(s, bar, "before training"), 0)
    skipped_in_row = solved_in_row = 0
    converged_at = None
    source.start()
    try:
        with bar:
            while s.learner.step < cfg.train.steps:
                t0 = time.perf_counter()
                batch = source.next_batch()
                episodes = [e for _, e in batch.trained]
                metrics = None
                if episodes:
                    with s.server.training():  # sampling goes on unless it runs this module
                        metrics = s.train_step(episodes)
                    # a sampler that dropped its weights for the step (vLLM's sleep level 2)
                    # gets them back even when the step trained nothing
                    if metrics is not None or s.server.awaits_weights:
                        s.publish()
                if metrics is None:  # nothing to train on: no step, a warning, a bound
                    s.ledger.record(
                        s.learner.step,
                        filtered=batch.trained + batch.filtered,
                        dropped=batch.dropped,
                    )
                    s.curriculum.record([e for _, e in batch.trained + batch.filtered])
                    s.skipped_batches += 1
                    skipped_in_row += 1
                    all_solved = _all_solved(batch, cfg.curriculum.solved_reward)
                    solved_in_row = solved_in_row + 1 if all_solved else 0
                    if _warn_skipped(s, batch, skipped_in_row, solved_in_row, bar):
                        converged_at = s.learner.step
                        break
                    continue
                skipped_in_row = solved_in_row = 0
                source.after_update(s.learner.step)
                s.ledger.record(
                    s.learner.step,
                    trained=batch.trained,
                    filtered=batch.filtered,
                    dropped=batch.dropped,
                )
                s.curriculum.record([e for _, e in batch.trained + batch.filtered + batch.dropped])
                seen = episodes + [e for _, e in batch.filtered]
                metrics.update(episode_metrics(seen, cfg.curriculum.solved_reward))
                metrics.update(batch.metrics)
                metrics.update(s.placement.metrics())
                metrics.update(
                    {
                        "batch_episodes": float(len(episodes)),
                        "groups_filtered": float(len({e.group_id for _, e in batch.filtered})),
                        "episodes_dropped": float(len(batch.dropped)),
                        "skipped_batches": float(s.skipped_batches),
                        "policy_version": float(s.server.version),
                        "step_seconds": time.perf_counter() - t0,
                    }
                )
                step = s.learner.step
                if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.train.steps:
                    ev = _evaluate(s, bar)
                    metrics.update(
                        {f"eval/{k}": v for k, v in ev.items() if isinstance(v, (int, float))}
                    )
                s.metrics.log(step, metrics)
                if step % cfg.train.checkpoint_every == 0:
                    with source.frozen():
                        s.checkpoint(source.state())
                bar.update(step, metrics, episodes=len(s.store))
    finally:
        source.stop()
    final = _evaluate(s, bar, "after training")
    extra = source.summary()
    if converged_at is not None:
        extra["converged_at_step"] = converged_at
    return s.finish(started, extra_summary=extra, final=final)


def _evaluate(s: Session, bar: TrainProgress, when: str = "") -> dict:
    """Held-out evaluation at the current step, reported as a progress line."""
    t0 = time.perf_counter()
    label = f"evaluating step {s.learner.step}" + (f" ({when})" if when else "")
    with bar.count(label, len(s.eval_tasks)) as count:
        result = s.evaluate(f"step_{s.learner.step:06d}", lambda e: count.advance())
    bar.evaluation(s.learner.step, result, time.perf_counter() - t0, when)
    return result


def _log_eval(s: Session, result: dict, step: int) -> None:
    s.metrics.log(step, {f"eval/{k}": v for k, v in result.items() if isinstance(v, (int, float))})


def _all_solved(batch: Batch, solved_reward: float) -> bool:
    """Dynamic sampling filtered every group, and every episode of them was solved: the
    policy solves each task it drew, alike in every sample (no group left to learn from)."""
    return (
        not batch.trained
        and bool(batch.filtered)
        and all(solved(e, solved_reward) for _, e in batch.filtered)
    )


def _warn_skipped(
    s: Session, batch: Batch, in_row: int, solved_in_row: int, bar: TrainProgress
) -> bool:
    """Warn about a batch that trained nothing; at `train.max_skipped_batches` in a row, end
    training as converged (True) when every one of them was all solved, else stop the run."""
    n = len(batch.trained) + len(batch.filtered)
    limit = s.cfg.train.max_skipped_batches
    why = (
        "every group's rewards were equal (dynamic sampling filtered them all)"
        if not batch.trained
        else "every episode was masked out (overlong or empty)"
    )
    msg = (
        f"batch {s.ledger.batches} had nothing to train on: {why}; {n} episodes, "
        f"{len(batch.dropped)} dropped. No step taken ({in_row} such batches in a row)."
    )
    if not (bar.enabled or bar.plain):  # shown already: one line, not one per stream
        log.warning(msg)
    bar.note(msg)
    if in_row >= limit and solved_in_row >= in_row:
        bar.note(
            f"training converged at step {s.learner.step}: {in_row} batches in a row had every "
            f"episode solved, with equal rewards in every group, so nothing is left to learn "
            f"from these tasks (train.max_skipped_batches={limit}); evaluating."
        )
        return True
    if in_row >= limit:
        raise TrainingError(
            f"{in_row} batches in a row had nothing to train on ({why}); the task may be too "
            f"hard or too easy for the policy, or the reward constant. Stopping at step "
            f"{s.learner.step} (train.max_skipped_batches={limit})."
        )
    return False
