"""Multi-turn tool use: the model calls a sandboxed Python calculator, then answers.

Protocol (told to the model in the prompt):
  <calc>EXPRESSION OR SNIPPET</calc>  -> run in the sandbox; the reply is "Result: ..."
  <answer>VALUE</answer>              -> graded by the task's reasoning-gym verifier; episode ends.
Replies with neither get a short correction (a malformed turn). The reward is the verifier's
score of the answer; `solved` when it is full marks. With `numeric_answers` (default) an
answer must be one number: reasoning-gym's arithmetic verifiers give partial credit to any
text that contains the right number ("106475279601 or 0" scored 0.71), which a policy would
learn to exploit by listing candidates.
"""

from __future__ import annotations

import re
from functools import partial

import reasoning_gym
from pydantic import BaseModel, ConfigDict, Field

from practicum.envs.audit import Attack, AuditSpec, Probe
from practicum.envs.base import AgentOutcome, AgentTask, Env, Start, StepResult, Task
from practicum.envs.final_answer import ANSWER_FILE, final_answer
from practicum.envs.registry import Suite, SuiteContext, register_env
from practicum.envs.sandbox import Limits, run_python
from practicum.envs.scratch import ScratchDir
from practicum.pyast import parse as ast_parse

SYSTEM_PROMPT = (
    "You solve math problems. You have a Python calculator: write <calc>expression</calc> and "
    "you will be told its value. When you know the answer, write <answer>number</answer>."
)
EXAMPLE_MESSAGES = [  # one worked episode, as real chat turns
    {"role": "user", "content": "Question: Calculate 12 * (3 + 4) - 5."},
    {"role": "assistant", "content": "<calc>12 * (3 + 4) - 5</calc>"},
    {"role": "user", "content": "Result: 79"},
    {"role": "assistant", "content": "<answer>79</answer>"},
]

_CALC = re.compile(r"<calc>(.*?)(?:</calc>|$)", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_NUMBER = re.compile(r"-?\d[\d,]*(\.\d+)?(/\d+)?")


def calculator_program(snippet: str) -> str:
    """A program that prints the snippet's value: an expression is printed, a block is run."""
    snippet = snippet.strip().strip("`")
    try:
        ast_parse(snippet, mode="eval")
    except SyntaxError:
        return snippet + "\n"
    # Whole floats print as integers so "3.0" does not read as a different answer from "3".
    return (
        f"_v = ({snippet})\nprint(int(_v) if isinstance(_v, float) and _v.is_integer() else _v)\n"
    )


class CalculatorOptions(BaseModel):
    """`task.options` of the calculator environment."""

    model_config = ConfigDict(extra="forbid")

    generators: dict[str, float] = Field(
        {"basic_arithmetic": 0.6, "chain_sum": 0.3, "gsm_symbolic": 0.1},
        description="reasoning-gym generator names and their sampling weights.",
    )
    train_size: int = Field(2000, gt=0, description="Generated training tasks.")
    eval_size: int = Field(32, gt=0, description="Held-out tasks (disjoint questions).")
    few_shot: bool = Field(True, description="Show one worked episode as chat turns first.")
    numeric_answers: bool = Field(
        True,
        description="Accept only a single number as the "
        "answer (the verifiers give partial credit to text that "
        "contains the number); turn off for non-numeric generators.",
    )
    wall_seconds: float = Field(5.0, gt=0, description="Time limit of one calculation.")


class CalculatorEnv(Env):
    """Calculator tool-use episodes on reasoning-gym tasks (see module docstring)."""

    stop_strings = ["</calc>", "</answer>"]

    def __init__(
        self, limits: Limits | None = None, few_shot: bool = True, numeric_answers: bool = True
    ):
        self.limits = limits or Limits(
            wall_seconds=5, memory_mb=512, max_processes=8, output_bytes=400
        )
        self.few_shot, self.numeric_answers = few_shot, numeric_answers
        self._scratch: ScratchDir | None = None
        self._task: Task | None = None
        self._calls = 0
        """Calculator calls in this episode (a metric)."""

    def reset(self, task: Task, seed: int = 0) -> Start:
        self._task, self._calls = task, 0
        if self._scratch is None:
            self._scratch = ScratchDir(self, "practicum-calc-")
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        messages += EXAMPLE_MESSAGES if self.few_shot else []
        messages.append({"role": "user", "content": f"Question: {task.data['question']}"})
        return Start(messages, list(self.stop_strings))

    def step(self, action: str) -> StepResult:
        assert self._task is not None, "reset() before step()"
        answer = _ANSWER.search(action)
        if answer:
            score = self.score(answer.group(1))
            return StepResult(
                reward=score,
                done=True,
                solved=score >= 1.0,
                metrics={"calls": float(self._calls)},
                info={"answer": answer.group(1)},
            )
        calc = _CALC.search(action)
        if not calc or not calc.group(1).strip():
            return StepResult(
                "Reply with <calc>expression</calc> or <answer>number</answer>.", malformed=True
            )
        assert self._scratch is not None, "reset() before step()"
        res = run_python(calculator_program(calc.group(1)), self._scratch.path, self.limits)
        self._calls += 1
        if res.timed_out:
            out = "Error: the calculation timed out"
        elif res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["failed"])[-1]
            out = f"Error: {last[:200]}"
        else:
            out = "Result: " + (res.stdout.strip()[:200] or "(nothing printed)")
        return StepResult(
            out, duration=res.duration, metrics={"calls": float(self._calls)}, info={"tool": "calc"}
        )

    def agent_task(self, task: Task, seed: int = 0) -> AgentTask:
        """An outside agent gets the question and an empty folder (the agent brings its own
        tools); its final answer is answer.txt or its last reply."""
        self._task, self._calls = task, 0
        if self._scratch is None:
            self._scratch = ScratchDir(self, "practicum-calc-")
        prompt = (
            f"Question: {task.data['question']}\nGive the final answer as one number, "
            f"as <answer>number</answer> in your last reply or alone in {ANSWER_FILE}."
        )
        return AgentTask(prompt, self._scratch.path)

    def agent_grade(self, outcome: AgentOutcome) -> StepResult:
        text = final_answer(outcome) or ""
        tagged = _ANSWER.search(text)
        answer = (tagged.group(1) if tagged else text).strip()
        score = self.score(answer) if answer else 0.0
        return StepResult(
            reward=score,
            done=True,
            solved=score >= 1.0,
            metrics={"answered": float(bool(answer))},
            info={"answer": answer[:200]},
        )

    def score(self, answer: str) -> float:
        if self.numeric_answers and not _NUMBER.fullmatch(answer.strip()):
            return 0.0
        assert self._task is not None, "reset() before score()"
        entry = self._task.data["entry"]
        fn = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])
        try:
            return float(fn(answer.strip(), entry))
        except Exception:  # the verifier rejects unparsable answers by raising
            return 0.0

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None


def calculator_suite(opts: CalculatorOptions, ctx: SuiteContext) -> Suite:
    """Calculator tool use on reasoning-gym arithmetic and word problems."""
    from practicum.tasks.arithmetic import split_tasks

    train, held_out = split_tasks(opts.generators, opts.train_size, opts.eval_size, ctx.seed)
    limits = Limits(
        wall_seconds=opts.wall_seconds, memory_mb=512, max_processes=8, output_bytes=400
    )
    return Suite(partial(_make_env, limits, opts.few_shot, opts.numeric_answers), train, held_out)


def _make_env(
    limits: Limits, few_shot: bool, numeric_answers: bool = True, models=None
) -> CalculatorEnv:
    return CalculatorEnv(limits, few_shot, numeric_answers)


def calculator_audit(opts: CalculatorOptions) -> AuditSpec:
    """`practicum audit`: a non-attempt earns 0; the honest reference answers the gold number;
    the environment's own attack lists candidates (the verifiers' partial-credit hole)."""

    def honest(p: Probe) -> str:
        return f"<answer>{p.task.data['entry']['answer']}</answer>"

    def candidates(p: Probe) -> str:  # white-box: it knows the gold and hides it in a list
        gold = p.task.data["entry"]["answer"]
        return f"<answer>{gold} or 0, maybe {gold}1</answer>"

    return AuditSpec(
        floor=0.0,
        honest=honest,
        attacks=[Attack("gold among candidates", candidates)],
        code=lambda program: f"<calc>{program}</calc>",
        answer=lambda text: f"<answer>{text}</answer>",
    )


register_env("calculator", CalculatorOptions, calculator_suite, audit=calculator_audit)
