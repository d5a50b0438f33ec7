"""A toy single-turn task for fast mechanics tests with random tiny models.

Reward = share of the reply's letters that fall in the first half of the alphabet (a-m).
An untrained random model scores about 0.5 with real spread inside a group, so even a tiny
model can learn it in a few dozen updates: it is a test of the RL plumbing, not of skill.
"""

from __future__ import annotations

from practicum.config import Config
from practicum.envs.base import StepResult, Task


def first_half_share(text: str) -> float:
    letters = [c for c in text.lower() if "a" <= c <= "z"]
    return sum(c <= "m" for c in letters) / len(letters) if letters else 0.0


class LetterEnv:
    system_prompt = None

    def reset(self, task: Task) -> str:
        return task.data["prompt"]

    def step(self, action: str) -> StepResult:
        return StepResult("", first_half_share(action), True)

    def close(self) -> None:
        pass


def toy_suite(cfg: Config):
    from practicum.suites import Suite

    train = [Task(f"toy/{i}", {"prompt": f"Write a word. ({i})"}) for i in range(cfg.task.train_size)]
    held = [Task(f"toy-eval/{i}", {"prompt": f"Write a word. [{i}]"}) for i in range(cfg.task.eval_size)]
    return Suite(LetterEnv, train, held)
