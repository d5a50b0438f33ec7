"""The environment contract's own behaviour."""

import pytest

from practicum.envs.base import Env, Start, StepResult, Task


class Counting(Env):
    def __init__(self):
        self.closed = 0

    def reset(self, task: Task, seed: int = 0) -> Start:
        return Start([{"role": "user", "content": task.task_id}])

    def step(self, action: str) -> StepResult:
        raise RuntimeError("the environment broke")

    def close(self) -> None:
        self.closed += 1


def test_an_env_closes_once_when_its_with_block_ends_even_by_an_error():
    with pytest.raises(RuntimeError, match="broke"):
        with Counting() as env:
            env.reset(Task("t"))
            assert env.closed == 0
            env.step("anything")
    assert env.closed == 1
