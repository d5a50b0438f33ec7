"""Task suites: for each `task.name`, an environment factory and train/held-out tasks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from practicum.config import Config
from practicum.envs.base import Env, Task


@dataclass
class Suite:
    make_env: Callable[[], Env]
    train_tasks: list[Task]
    eval_tasks: list[Task]
    state: Callable[[], dict] | None = None
    """State the environments build up while training (e.g. the MLE solution buffer), as a
    JSON-able dict; checkpoints keep it so a resumed run continues with it."""
    load_state: Callable[[dict], None] | None = None
    """Restore what `state` returned."""


def load_suite(cfg: Config) -> Suite:
    name = cfg.task.name
    if name == "calculator":
        from practicum.envs.calculator import CalculatorEnv
        from practicum.tasks.arithmetic import split_tasks

        train, held_out = split_tasks(cfg.task.generators, cfg.task.train_size,
                                      cfg.task.eval_size, cfg.run.seed)
        few_shot = bool(cfg.task.options.get("few_shot", True))
        return Suite(lambda: CalculatorEnv(few_shot=few_shot), train, held_out)
    if name == "mle":
        from practicum.envs.mle.suite import mle_suite

        return mle_suite(cfg)
    if name == "timed_bandit":
        from practicum.envs.timed_bandit import timed_bandit_suite

        return timed_bandit_suite(cfg)
    if name == "toy":
        from practicum.envs.toy import toy_suite

        return toy_suite(cfg)
    raise ValueError(f"config error at task.name: unknown task suite {name!r}")


class TaskCursor:
    """Deterministic pass over the training tasks, reshuffled each epoch; `position` is saved
    in checkpoints so a resumed run continues with exactly the next tasks."""

    def __init__(self, tasks: list[Task], seed: int, position: int = 0):
        if not tasks:
            raise ValueError("the task suite has no training tasks")
        self.tasks, self.seed, self.position = tasks, seed, position

    def _order(self, epoch: int) -> list[int]:
        import random

        order = list(range(len(self.tasks)))
        random.Random(self.seed * 7919 + epoch).shuffle(order)
        return order

    def take(self, n: int) -> list[Task]:
        out = []
        for _ in range(n):
            epoch, i = divmod(self.position, len(self.tasks))
            out.append(self.tasks[self._order(epoch)[i]])
            self.position += 1
        return out
