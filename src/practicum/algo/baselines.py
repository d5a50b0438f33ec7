"""A per-task running baseline: the advantage of streaming batches, which have no groups.

When the learner trains on the first episodes to finish (arXiv 2509.01684's actors feeding one
learner), an episode has no group of siblings to compare with. Its advantage is measured
against the rewards its task earned before:

    A_i = R_i - b(task_i),   b(task) = mean of the task's last `window` rewards

b uses only rewards of earlier batches, so an episode never baselines against itself. A task
with no history yet uses the mean over every task's history; with no history at all, the mean
reward of the current batch.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from torch import Tensor


class TaskBaselines:
    def __init__(self, window: int = 32):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self._history: dict[str, deque[float]] = {}

    def baseline(self, task_id: str, fallback: float) -> float:
        past = self._history.get(task_id)
        if past:
            return sum(past) / len(past)
        everything = [r for h in self._history.values() for r in h]
        return sum(everything) / len(everything) if everything else fallback

    def advantages(self, task_ids: list[str], rewards: Tensor) -> Tensor:
        """A_i = R_i - b(task_i) from earlier batches only (module doc). rewards: [N]."""
        if len(task_ids) != len(rewards):
            raise ValueError(f"{len(task_ids)} task ids for {len(rewards)} rewards")
        batch_mean = float(rewards.mean()) if len(rewards) else 0.0
        b = torch.tensor([self.baseline(t, batch_mean) for t in task_ids], dtype=rewards.dtype)
        return rewards - b

    def update(self, task_ids: list[str], rewards: list[float]) -> None:
        for t, r in zip(task_ids, rewards):
            self._history.setdefault(t, deque(maxlen=self.window)).append(float(r))

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window, "history": {t: list(h) for t, h in self._history.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window = int(state["window"])
        self._history = {
            t: deque(map(float, h), maxlen=self.window) for t, h in state["history"].items()
        }
