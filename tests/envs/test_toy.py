"""The toy environment: its reward, and its grammar option."""

import pytest

from practicum.config import load_config
from practicum.envs.base import Task
from practicum.envs.registry import SuiteContext, build_suite
from practicum.envs.toy import first_half_share
from practicum.errors import ConfigError


def test_reward_is_the_share_of_first_half_letters():
    assert first_half_share("abz!") == pytest.approx(2 / 3) and first_half_share("42") == 0.0


def test_every_episode_starts_under_the_configured_grammar():
    suite = build_suite("toy", {"grammar": "start: /[a-z]{1,8}/"}, SuiteContext())
    start = suite.make_env(None).reset(Task("toy/0", {"prompt": "Write a word."}), 0)
    assert start.grammar == "start: /[a-z]{1,8}/"
    free = build_suite("toy", {}, SuiteContext()).make_env(None)
    assert free.reset(Task("toy/0", {"prompt": "Write a word."}), 0).grammar is None


def test_a_malformed_grammar_is_a_config_error_naming_the_option():
    with pytest.raises(ConfigError, match=r"task.options.grammar: .*grammar error"):
        load_config(None, ["task.name=toy", 'task.options.grammar="start: word"'])
