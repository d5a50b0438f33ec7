"""The environment interface: Gym-like, text in and text out, every step timed.

`reset(task)` returns the first user message; `step(action)` runs the policy's reply and
returns the next observation. Code never runs in the trainer's process: environments that
execute anything do it through `practicum.envs.sandbox`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Task:
    """One problem instance. `data` is environment-specific (question, answer, competition id...)."""

    task_id: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    observation: str
    """Text shown to the policy next (ignored when done)."""
    reward: float
    """Reward for this step; when done, the episode's final reward."""
    done: bool
    duration: float = 0.0
    """Wall-clock seconds the step's real work took (code execution, tests)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form; `failure` (str) marks an abnormal end: crash, timeout, unparsable action."""


class Env(Protocol):
    """A stateful environment. One instance serves one episode at a time."""

    system_prompt: str | None
    # Optional attributes the runtime reads when present:
    #   example_messages: list[dict]  few-shot chat turns placed before the first user message
    #   stop_strings: list[str]       generation of a turn ends once one of these is produced

    def reset(self, task: Task) -> str:
        """Start an episode; return the first user message."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply the policy's reply; return what happened."""
        ...

    def close(self) -> None:
        """Release processes and files."""
        ...
