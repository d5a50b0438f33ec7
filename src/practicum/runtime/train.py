"""One call that trains a config end to end with the runtime it names (CLI, benchmarks)."""

from __future__ import annotations

from practicum.config import Config


def run_training(cfg: Config, progress: bool = True, keep: list[str] | None = None) -> dict:
    """Open (or resume) the run folder's session, train it to cfg.train.steps with the sync or
    async batch source, close it; returns the run summary. `keep` restricts the training tasks
    to those ids (a stage's curriculum refresh)."""
    from practicum.runtime.cursor import TaskCursor
    from practicum.runtime.loop import train
    from practicum.runtime.session import open_session

    s = open_session(cfg)
    try:
        if keep is not None:
            wanted = set(keep)
            s.suite.train_tasks = [t for t in s.suite.train_tasks if t.task_id in wanted]
            s.cursor = TaskCursor(s.suite.train_tasks, cfg.run.seed, s.cursor.position,
                                  curriculum=s.curriculum)
        if cfg.runtime.mode == "async":
            from practicum.runtime.async_ import AsyncBatches

            source = AsyncBatches(s)
        else:
            from practicum.runtime.sync import SyncBatches

            source = SyncBatches(s)
        return train(s, source, progress=progress)
    finally:
        s.close()
