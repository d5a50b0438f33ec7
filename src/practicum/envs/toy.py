"""A toy single-turn task for fast mechanics tests with random tiny models.

Reward = share of the reply's letters that fall in the first half of the alphabet (a-m).
An untrained random model scores about 0.5 with real spread inside a group, so even a tiny
model can learn it in a few dozen updates: it is a test of the RL plumbing, not of skill.
With `grammar` every reply is sampled under that Lark grammar (constrained decoding,
`practicum.engine.constraint`), e.g. `start: /[a-z]{1,8}/` for one lowercase word.
"""

from __future__ import annotations

import functools

from pydantic import BaseModel, ConfigDict, Field, field_validator

from practicum.envs.audit import AuditSpec
from practicum.envs.base import AgentOutcome, AgentTask, Env, Start, StepResult, Task
from practicum.envs.final_answer import final_answer
from practicum.envs.registry import Suite, SuiteContext, register_env
from practicum.envs.scratch import ScratchDir


class ToyOptions(BaseModel):
    """`task.options` of the toy environment."""

    model_config = ConfigDict(extra="forbid")

    train_size: int = Field(64, gt=0, description="Training prompts.")
    eval_size: int = Field(8, gt=0, description="Held-out prompts.")
    grammar: str | None = Field(
        None,
        description="Lark grammar (llguidance syntax) every "
        "reply is sampled under; None = free text.",
    )

    @field_validator("grammar")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            from practicum.engine.constraint import compiled

            compiled(v)  # a GrammarError (a ValueError) names the grammar
        return v


def first_half_share(text: str) -> float:
    letters = [c for c in text.lower() if "a" <= c <= "z"]
    return sum(c <= "m" for c in letters) / len(letters) if letters else 0.0


class LetterEnv(Env):
    def __init__(self, grammar: str | None = None):
        self.grammar = grammar
        self._scratch: ScratchDir | None = None

    def reset(self, task: Task, seed: int = 0) -> Start:
        return Start([{"role": "user", "content": task.data["prompt"]}], grammar=self.grammar)

    def step(self, action: str) -> StepResult:
        reward = first_half_share(action)
        return StepResult(reward=reward, done=True, metrics={"share": reward})

    def agent_task(self, task: Task, seed: int = 0) -> AgentTask:
        """An outside agent gets the prompt and an empty folder; its final answer (answer.txt
        or its last reply) is scored like a reply."""
        self._scratch = self._scratch or ScratchDir(self, "practicum-toy-")
        return AgentTask(task.data["prompt"], self._scratch.path)

    def agent_grade(self, outcome: AgentOutcome) -> StepResult:
        return self.step(final_answer(outcome) or "")

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None


def make_letter_env(models=None, grammar: str | None = None) -> LetterEnv:
    return LetterEnv(grammar)


def toy_suite(opts: ToyOptions, ctx: SuiteContext) -> Suite:
    """Reply with letters from the first half of the alphabet (a plumbing test)."""
    train = [Task(f"toy/{i}", {"prompt": f"Write a word. ({i})"}) for i in range(opts.train_size)]
    held = [
        Task(f"toy-eval/{i}", {"prompt": f"Write a word. [{i}]"}) for i in range(opts.eval_size)
    ]
    return Suite(functools.partial(make_letter_env, grammar=opts.grammar), train, held)


def toy_audit(opts: ToyOptions) -> AuditSpec:
    """`practicum audit`: the reward is defined on any text (there is no task to skip), so every
    reply is an attempt and the floor is the top reward; the audit still checks crashes."""
    return AuditSpec(floor=1.0, honest=lambda p: "A blade fled.")


register_env("toy", ToyOptions, toy_suite, audit=toy_audit)
