"""A package outside practicum: an environment (`task.name: echo`) with a command of its own
(`practicum echo tasks`) and an engine (`engine.kind: traced`), which practicum knows only
through entry points (tests/test_cli_plugins.py writes the dist-info declaring them).

The engine is the HF engine with every `generate` call counted in the file `engine.trace`;
the environment rewards the share of vowels among a one-turn reply's letters.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from practicum.engine.kinds import register_engine
from practicum.engine.options import EngineOptions, HFOptions
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.registry import (
    CommandHost,
    Suite,
    SuiteContext,
    register_command,
    register_env,
)


class EchoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(4, gt=0, description="Training tasks (2 held out besides).")


def vowel_share(text: str) -> float:
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


class EchoEnv(Env):
    def reset(self, task: Task, seed: int = 0) -> Start:
        return Start([{"role": "user", "content": task.data["prompt"]}])

    def step(self, action: str) -> StepResult:
        return StepResult(reward=vowel_share(action), done=True)


def echo_tasks(n: int, split: str) -> list[Task]:
    return [
        Task(f"echo-{split}/{i}", {"prompt": f"Say something ({split} {i})."}) for i in range(n)
    ]


def echo_suite(options: EchoOptions, ctx: SuiteContext) -> Suite:
    """Reply with vowels (a stand-in registered from tests/)."""
    return Suite(
        lambda models: EchoEnv(), echo_tasks(options.tasks, "train"), echo_tasks(2, "eval")
    )


def add_arguments(parser: argparse.ArgumentParser, host: CommandHost) -> None:
    sub = parser.add_subparsers(dest="echo_command", required=True)
    tasks = sub.add_parser("tasks", help="print the training task ids")
    tasks.add_argument("--count", type=int, default=4)
    tasks.set_defaults(func=lambda args: print_tasks(args.count))


def print_tasks(count: int) -> int:
    suite = echo_suite(EchoOptions(tasks=count), SuiteContext())
    print(" ".join(t.task_id for t in suite.train_tasks))
    return 0


class TracedOptions(EngineOptions):
    kind: Literal["traced"] = Field("traced", description="The HF engine, calls counted.")
    trace: str = Field(description="File that gets one line per generate call.")


def build_sampler(options: TracedOptions, policy, trainable=None):
    from practicum.engine.hf import build_sampler as hf_sampler

    sampler = hf_sampler(HFOptions(), policy, trainable)
    trace, generate = Path(options.trace), sampler.generate

    def traced(prompts, params, seeds=None, adapter=True):
        with trace.open("a") as f:
            f.write(f"{len(prompts)}\n")
        return generate(prompts, params, seeds, adapter)

    sampler.generate = traced
    return sampler


register_env("echo", EchoOptions, echo_suite)
register_engine("traced", TracedOptions, build_sampler)
register_command("echo", "the stand-in environment's own command", add_arguments)
