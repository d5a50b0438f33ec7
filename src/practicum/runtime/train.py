"""One call that trains a config end to end with the runtime it names (CLI, benchmarks)."""

from __future__ import annotations

from practicum.config import Config
from practicum.errors import ConfigError


def check_nucleus(cfg: Config) -> None:
    """RL refuses top_p < 1: the sampler's log-probs are renormalised over the nucleus it kept,
    which the learner cannot rebuild (its log-probs run over every allowed token, and the
    nucleus moves with every update), so the importance ratios would be biased by the kept
    mass. Grammar masks are exact instead: the learner replays them (engine/constraint.py)."""
    s = cfg.sampling
    if s.top_p < 1 and s.temperature > 0:
        raise ConfigError(
            f"config error at sampling.top_p: RL training needs 1 (got {s.top_p}): "
            "the learner cannot replay the sampler's nucleus, so importance "
            "ratios would be off by its kept mass"
        )


def run_training(cfg: Config, progress: bool = True, keep: list[str] | None = None) -> dict:
    """Open (or resume) the run folder's session, train it to cfg.train.steps with the sync or
    async batch source, close it; returns the run summary. `keep` restricts the training tasks
    to those ids (a stage's curriculum refresh)."""
    check_nucleus(cfg)
    from practicum.runtime.cursor import TaskCursor
    from practicum.runtime.loop import train
    from practicum.runtime.session import open_session

    s = open_session(cfg)
    try:
        if keep is not None:
            wanted = set(keep)
            s.suite.train_tasks = [t for t in s.suite.train_tasks if t.task_id in wanted]
            s.cursor = TaskCursor(
                s.suite.train_tasks, cfg.run.seed, s.cursor.position, curriculum=s.curriculum
            )
        if cfg.runtime.mode == "async":
            from practicum.runtime.async_ import AsyncBatches

            source = AsyncBatches(s)
        else:
            from practicum.runtime.sync import SyncBatches

            source = SyncBatches(s)
        return train(s, source, progress=progress)
    finally:
        s.close()
