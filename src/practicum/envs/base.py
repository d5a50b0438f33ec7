"""The environment contract: Gym-like, chat messages in, text actions, one typed result per step.

    with make_env(models) as env:      # `close` on the way out, however the episode ends
        start = env.reset(task, seed)  # Start: the first prompt's chat messages + stop strings
        result = env.step(action_text) # StepResult: observation, reward, done, duration, ...

An environment that can host an outside agent (`rollout.agent`, `practicum.agent`) also says
what the agent gets and how its outcome is graded:

    setup = env.agent_task(task, seed)   # AgentTask: the task text, a work folder, hidden paths
    result = env.agent_grade(outcome)    # AgentOutcome (folder, last reply, exit) -> StepResult

The runtime reads only these fields; it knows nothing environment-specific. Code never runs in
the trainer's process: environments that execute anything do it through
`practicum.envs.sandbox`. LLM calls an environment makes itself (an instrumenter, an executor,
a judge) go through the `ModelService` its factory receives (`practicum.engine.service`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from practicum.engine.chat import Message  # re-exported: environments write chat messages

if TYPE_CHECKING:
    from practicum.engine.service import ModelService

__all__ = [
    "HEADLINE",
    "AgentOutcome",
    "AgentTask",
    "Env",
    "EnvFactory",
    "Message",
    "Start",
    "StepResult",
    "Task",
]

HEADLINE = "headline/"
"""Prefix of an episode metric that progress lines show beside reward and solved rate: the
environment's own measure of a usable outcome (MLE's `headline/valid`, a valid submission)."""


@dataclass
class Task:
    """One problem instance. `data` is environment-specific (question, answer, competition
    id...)."""

    task_id: str
    data: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
    """The GRPO group this instance was drawn for (`g{index}/{task_id}`), set by the runtime
    at `reset`: its members are samples of one prompt, so an environment that draws part of
    its prompt (MLE's self-improvement prompts) draws it once per group. None outside groups."""


@dataclass
class Start:
    """What `reset` returns: the first prompt, and when a turn's generation must stop."""

    messages: list[Message]
    """System message, few-shot turns and the first user message, rendered by the chat template."""
    stop_strings: list[str] = field(default_factory=list)
    """Generation of every turn of this episode ends once one of these has been produced."""
    grammar: str | None = None
    """Lark grammar (llguidance syntax) the next assistant turn must match; None: free text."""


@dataclass
class StepResult:
    """What `step` returns. Only `done=True` results end an episode."""

    observation: str = ""
    """Text shown to the policy next as a user turn (ignored when done or when `context` is set)."""
    reward: float = 0.0
    """Reward of this step; when done, the episode's final reward."""
    done: bool = False
    duration: float = 0.0
    """Wall-clock seconds the step's real work took (code execution, tests); feeds the
    duration-aware weights. 0 lets the runtime time the whole `step` call instead."""
    malformed: bool = False
    """The action could not be parsed or applied (RFT masks such turns; metrics count them)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Numbers about the episode so far (e.g. {"milestones": 3.0}). Those of an episode's last
    step describe the episode: evaluations and logs average them over episodes (as `env/NAME`);
    a name starting with `HEADLINE` is also shown on evaluation progress lines."""
    solved: bool | None = None
    """With done: whether the task was solved (success rates, RFT selection, the curriculum).
    None = the environment has no notion of solving; a reward threshold is used instead."""
    failure: str | None = None
    """Set when the episode ended abnormally (crash, timeout, unusable action); implies done."""
    context: list[Message] | None = None
    """When set, the next turn starts a new segment whose prompt is these messages rendered
    afresh (AgentFlow's planner rebuilds its prompt from memory every turn) instead of
    appending `observation` to the sequence so far."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form details stored with the turn (not read by the runtime)."""
    grammar: str | None = None
    """Lark grammar (llguidance syntax) the next assistant turn must match; None: free text."""


@dataclass
class AgentTask:
    """What an outside agent gets for one task (`Env.agent_task`)."""

    prompt: str
    """The task as text (given to the agent as a file, an argument or stdin)."""
    workdir: Path
    """Its working folder: cwd and only writable host folder (a repository, the public files
    of a competition, an empty folder); the environment removes it in `close`."""
    hidden: list[Path] = field(default_factory=list)
    """Host paths the agent must not read (answers, the task source)."""
    wall_seconds: float | None = None
    """The environment's time limit for the whole run; None: `rollout.agent.time_limit_s`."""


@dataclass
class AgentOutcome:
    """How an outside agent's run ended, for `Env.agent_grade` (or a user's grader)."""

    workdir: Path
    """What it left (read it with `practicum.envs.sandbox.read_workdir_file`: never follow
    links the agent planted)."""
    last_reply: str | None
    """Text of the policy's last reply to it (a final answer may be there); None: no call."""
    exit_code: int | None
    """The agent's exit status; None when it was stopped (time limit, submit condition)."""
    log: str = ""
    """The tail of its stdout and stderr."""
    replies: list[str] = field(default_factory=list)
    """Text of every policy reply it got, in call order."""


E = TypeVar("E", bound="Env")


class Env(ABC):
    """A stateful environment serving one episode at a time."""

    @abstractmethod
    def reset(self, task: Task, seed: int) -> Start:
        """Start an episode of `task`; `seed` makes any randomness of the episode repeatable."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the policy's reply; say what happened."""

    def close(self) -> None:  # noqa: B027 - an optional hook: most environments hold nothing
        """Release processes and files (called once per episode, after it ended)."""

    def __enter__(self: E) -> E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def kill(self) -> None:  # noqa: B027 - an optional hook, as close
        """Stop work in progress now, from another thread (runtime shutdown). Default: nothing."""

    def agent_task(self, task: Task, seed: int) -> AgentTask:
        """Set up `task` for an outside agent (`rollout.agent`); the default refuses."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot host an outside agent "
            "(rollout.agent): it has no agent_task/agent_grade"
        )

    def agent_grade(self, outcome: AgentOutcome) -> StepResult:
        """Grade what the outside agent left: reward, solved, metrics (done is implied)."""
        raise NotImplementedError(f"{type(self).__name__} cannot grade an outside agent")


EnvFactory = Callable[["ModelService"], Env]
"""Builds a fresh environment for one episode; receives the run's model service."""
