"""The task cursor: a deterministic, resumable order; the curriculum skips useless tasks."""

import pytest

from practicum.config import CurriculumConfig
from practicum.envs.base import Task
from practicum.episode import Episode
from practicum.errors import TrainingError
from practicum.runtime.cursor import Curriculum, TaskCursor

TASKS = [Task(f"t{i}") for i in range(4)]


def test_the_order_is_a_fresh_shuffle_per_epoch_and_repeats_from_a_position():
    cursor = TaskCursor(TASKS, seed=3)
    first = cursor.take(8)
    assert [i for i, _ in first] == list(range(8))
    assert {t.task_id for _, t in first[:4]} == {t.task_id for t in TASKS}
    again = TaskCursor(TASKS, seed=3, position=5)
    assert again.take(3) == first[5:]


def _solved(task_id: str, ok: bool) -> Episode:
    return Episode(task_id, "g", [1], solved=ok)


def test_the_curriculum_skips_tasks_always_or_never_solved():
    curriculum = Curriculum(CurriculumConfig(enabled=True, min_attempts=2, max_solve_rate=0.6))
    curriculum.record(
        [
            _solved("t0", True),
            _solved("t0", True),  # too easy
            _solved("t1", False),
            _solved("t1", False),  # too hard
            _solved("t2", True),
            _solved("t2", False),
        ]
    )  # teaches something
    cursor = TaskCursor(TASKS, seed=0, curriculum=curriculum)
    drawn = {t.task_id for _, t in cursor.take(12)}
    assert drawn == {"t2", "t3"}


def test_without_a_verdict_the_reward_threshold_decides():
    curriculum = Curriculum(CurriculumConfig(enabled=True, min_attempts=1, solved_reward=0.5))
    curriculum.record([Episode("t0", "g", [1], reward=0.7)])
    assert curriculum.tracker.successes("t0") == 1


def test_a_curriculum_that_drops_everything_is_an_error():
    curriculum = Curriculum(CurriculumConfig(enabled=True, min_attempts=1))
    curriculum.record([_solved(t.task_id, True) for t in TASKS])
    with pytest.raises(TrainingError, match="dropped every one of the 4 training tasks"):
        TaskCursor(TASKS, seed=0, curriculum=curriculum).take_one()
    disabled = Curriculum(CurriculumConfig(enabled=False))
    disabled.record([_solved(t.task_id, True) for t in TASKS])
    assert TaskCursor(TASKS, 0, curriculum=disabled).take_one()[1] in TASKS
