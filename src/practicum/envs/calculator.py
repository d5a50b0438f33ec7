"""Multi-turn tool use: the model calls a sandboxed Python calculator, then answers.

Protocol (told to the model in the prompt):
  <calc>EXPRESSION OR SNIPPET</calc>  -> the environment runs it in the sandbox, replies "Result: ..."
  <answer>VALUE</answer>              -> graded by the task's reasoning-gym verifier; episode ends.
Replies with neither get a short correction. The reward is the verifier's score of the answer.
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
from pathlib import Path

import reasoning_gym

from practicum.envs.base import StepResult, Task
from practicum.envs.sandbox import Limits, run_python

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


def calculator_program(snippet: str) -> str:
    """A program that prints the snippet's value: an expression is printed, a block is run."""
    snippet = snippet.strip().strip("`")
    try:
        ast.parse(snippet, mode="eval")
    except SyntaxError:
        return snippet + "\n"
    # Whole floats print as integers so "3.0" does not read as a different answer from "3".
    return (f"_v = ({snippet})\n"
            "print(int(_v) if isinstance(_v, float) and _v.is_integer() else _v)\n")


class CalculatorEnv:
    """Calculator tool-use episodes on reasoning-gym tasks (see module docstring)."""

    system_prompt = SYSTEM_PROMPT
    stop_strings = ["</calc>", "</answer>"]

    def __init__(self, limits: Limits | None = None, few_shot: bool = True):
        self.limits = limits or Limits(wall_seconds=5, memory_mb=512, max_processes=8,
                                       output_bytes=400)
        self.example_messages = EXAMPLE_MESSAGES if few_shot else []
        self._workdir: Path | None = None
        self._task: Task | None = None

    def reset(self, task: Task) -> str:
        self._task = task
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="practicum-calc-"))
        return f"Question: {task.data['question']}"

    def step(self, action: str) -> StepResult:
        assert self._task is not None, "reset() before step()"
        answer = _ANSWER.search(action)
        if answer:
            return StepResult("", self.score(answer.group(1)), True, info={"answer": answer.group(1)})
        calc = _CALC.search(action)
        if not calc or not calc.group(1).strip():
            return StepResult("Reply with <calc>expression</calc> or <answer>number</answer>.",
                              0.0, False, info={"malformed": True})
        res = run_python(calculator_program(calc.group(1)), self._workdir, self.limits)
        if res.timed_out:
            out = "Error: the calculation timed out"
        elif res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["failed"])[-1]
            out = f"Error: {last[:200]}"
        else:
            out = "Result: " + (res.stdout.strip()[:200] or "(nothing printed)")
        return StepResult(out, 0.0, False, duration=res.duration, info={"tool": "calc"})

    def score(self, answer: str) -> float:
        entry = self._task.data["entry"]
        fn = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])
        try:
            return float(fn(answer.strip(), entry))
        except Exception:
            return 0.0

    def close(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
