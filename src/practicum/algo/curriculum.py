"""Curriculum refresh: track per-task solve rates and drop tasks that teach nothing."""

from __future__ import annotations

from typing import Any


class SolveRateTracker:
    """Running (attempts, successes) per task id (curriculum refresh, arXiv 2508.03501).

    A task the policy almost always solves, or never solves, yields groups with (near) zero
    advantage; `keep` says which tasks are still worth sampling.
    """

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}  # task_id -> [attempts, successes]

    def update(self, task_id: str, solved: bool) -> None:
        counts = self._counts.setdefault(task_id, [0, 0])
        counts[0] += 1
        counts[1] += int(bool(solved))

    def attempts(self, task_id: str) -> int:
        return self._counts.get(task_id, [0, 0])[0]

    def successes(self, task_id: str) -> int:
        return self._counts.get(task_id, [0, 0])[1]

    def solve_rate(self, task_id: str) -> float:
        """successes / attempts; 0.0 for a task never attempted."""
        attempts, successes = self._counts.get(task_id, [0, 0])
        return successes / attempts if attempts else 0.0

    def keep(self, task_id: str, max_rate: float = 2 / 3, min_attempts: int = 8) -> bool:
        """The curriculum rule: after at least `min_attempts` attempts a task is dropped
        (False) if it was never solved or solved more often than `max_rate`; True otherwise,
        including for unseen tasks."""
        attempts, successes = self._counts.get(task_id, [0, 0])
        return attempts < min_attempts or 0 < successes / attempts <= max_rate

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: {"tasks": {task_id: {"attempts": n, "successes": k}}}."""
        return {"tasks": {t: {"attempts": a, "successes": s} for t, (a, s) in self._counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"tasks"}:
            raise ValueError(
                f"SolveRateTracker state must have exactly the key 'tasks', got {sorted(state)}"
            )
        counts: dict[str, list[int]] = {}
        for task_id, entry in state["tasks"].items():
            attempts, successes = int(entry["attempts"]), int(entry["successes"])
            if not 0 <= successes <= attempts:
                raise ValueError(
                    f"task {task_id!r}: need 0 <= successes <= attempts, "
                    f"got successes={successes}, attempts={attempts}"
                )
            counts[task_id] = [attempts, successes]
        self._counts = counts
