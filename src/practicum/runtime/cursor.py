"""The order in which training tasks are drawn, and the curriculum that skips useless ones.

`TaskCursor` makes a deterministic pass over the training tasks, reshuffled each epoch; its
`position` (how many task slots it has gone through) goes into checkpoints, so a resumed run
continues with exactly the next tasks. With a curriculum (`curriculum.enabled`, arXiv
2508.03501's refresh), tasks the policy solves too often or never solves are skipped: their
solve rates come from the episodes the learner consumed (`SolveRateTracker`).
"""

from __future__ import annotations

import random
import threading

from practicum.algo.curriculum import SolveRateTracker
from practicum.config import CurriculumConfig
from practicum.envs.base import Task
from practicum.episode import Episode
from practicum.errors import TrainingError
from practicum.report import solved


class Curriculum:
    """Per-task solve rates of consumed episodes and the keep/drop rule (thread-safe)."""

    def __init__(self, cfg: CurriculumConfig):
        self.cfg = cfg
        self.tracker = SolveRateTracker()
        self._lock = threading.Lock()

    def record(self, episodes: list[Episode]) -> None:
        with self._lock:
            for e in episodes:
                self.tracker.update(e.task_id, solved(e, self.cfg.solved_reward))

    def keep(self, task_id: str) -> bool:
        if not self.cfg.enabled:
            return True
        with self._lock:
            return self.tracker.keep(task_id, self.cfg.max_solve_rate, self.cfg.min_attempts)

    def state(self) -> dict:
        with self._lock:
            return self.tracker.state_dict()

    def load_state(self, state: dict) -> None:
        with self._lock:
            self.tracker.load_state_dict(state)


class TaskCursor:
    def __init__(
        self, tasks: list[Task], seed: int, position: int = 0, curriculum: Curriculum | None = None
    ):
        if not tasks:
            raise TrainingError("the task suite has no training tasks")
        self.tasks, self.seed, self.position = tasks, seed, position
        self.curriculum = curriculum
        self._lock = threading.Lock()

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(self.seed * 7919 + epoch).shuffle(order)
        return order

    def take_one(self) -> tuple[int, Task]:
        """(position, task) of the next task the curriculum keeps; advances the cursor."""
        with self._lock:
            for _ in range(2 * len(self.tasks)):  # a whole epoch at least
                epoch, i = divmod(self.position, len(self.tasks))
                task = self.tasks[self._order(epoch)[i]]
                index = self.position
                self.position += 1
                if self.curriculum is None or self.curriculum.keep(task.task_id):
                    return index, task
        raise TrainingError(
            f"the curriculum dropped every one of the {len(self.tasks)} training "
            f"tasks (solved more often than curriculum.max_solve_rate, or never "
            f"solved in curriculum.min_attempts tries)"
        )

    def take(self, n: int) -> list[tuple[int, Task]]:
        return [self.take_one() for _ in range(n)]
