"""Environments register by name with typed options; nothing central lists them."""

import pytest
from pydantic import BaseModel, ConfigDict

from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.registry import (
    Suite,
    SuiteContext,
    build_suite,
    env_entry,
    known_envs,
    register_env,
)
from practicum.errors import ConfigError


class EchoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    word: str = "hi"
    times: int = 1


class EchoEnv(Env):
    def __init__(self, word):
        self.word = word

    def reset(self, task, seed=0):
        return Start([{"role": "user", "content": self.word}])

    def step(self, action):
        return StepResult(reward=float(self.word in action), done=True)


def echo_suite(opts: EchoOptions, ctx: SuiteContext) -> Suite:
    """Say the word."""
    tasks = [Task(f"echo/{i}") for i in range(opts.times)]
    return Suite(lambda models: EchoEnv(opts.word * opts.times), tasks, tasks[:1])


def test_a_registered_environment_is_built_from_validated_options():
    register_env("echo_test", EchoOptions, echo_suite)
    suite = build_suite("echo_test", {"word": "ab", "times": 2}, SuiteContext(seed=1))
    assert [t.task_id for t in suite.train_tasks] == ["echo/0", "echo/1"]
    env = suite.make_env(None)
    assert env.reset(Task("x")).messages[0]["content"] == "abab"
    assert env_entry("echo_test").doc == "Say the word."
    with pytest.raises(
        ConfigError,
        match=r"task\.options\.times: Input should be a valid "
        r"integer.*got 'two'",
    ):
        build_suite("echo_test", {"times": "two"}, SuiteContext())
    with pytest.raises(ConfigError, match=r"task\.options\.wrod: unknown echo_test option"):
        build_suite("echo_test", {"wrod": "x"}, SuiteContext())


def test_built_in_environments_register_themselves_on_first_use():
    assert {"calculator", "mle", "timed_bandit", "toy"} <= set(known_envs())
    assert env_entry("toy").options.__name__ == "ToyOptions"
    with pytest.raises(ConfigError, match="unknown environment 'nope'"):
        env_entry("nope")
