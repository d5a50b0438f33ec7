"""The timed bandit: choices parse, durations are heavy-tailed with the right mean and really
elapse, failures are defined, options are validated."""

import random
import statistics

import pytest

from practicum.config import load_config
from practicum.envs.base import Task
from practicum.envs.process_env import ProcessEnv
from practicum.envs.registry import SuiteContext, build_suite
from practicum.envs.timed_bandit import (
    BanditOptions,
    TimedBanditEnv,
    draw_duration,
    parse_choice,
    run_for,
)
from practicum.errors import ConfigError


def test_parse_choice_tag_word_and_ambiguity():
    names = ["fast", "slow"]
    assert parse_choice("I pick <choice> Slow </choice>.", names) == "slow"
    assert parse_choice("fast please", names) == "fast"
    assert parse_choice("<choice>medium</choice>", names) is None
    assert parse_choice("fast or slow?", names) is None
    assert parse_choice("faster", names) is None
    # the prompt's list echoed back picks nothing (it used to pick its first tag)
    assert parse_choice("one of: <choice>fast</choice>, <choice>slow</choice>", names) is None
    assert parse_choice("<choice>slow</choice> again: <choice>Slow</choice>", names) == "slow"


def test_lognormal_durations_keep_the_mean_and_have_a_heavy_tail():
    rng = random.Random(0)
    xs = [draw_duration(rng, 2.0, "lognormal", sigma=1.0) for _ in range(20000)]
    assert statistics.fmean(xs) == pytest.approx(2.0, rel=0.05)
    # lognormal median = mean * exp(-sigma^2 / 2) = 2 * 0.6065
    assert statistics.median(xs) == pytest.approx(2.0 * 0.6065, rel=0.05)
    assert max(xs) > 15 * statistics.median(xs)


def test_pareto_durations_have_the_right_scale():
    rng = random.Random(1)
    xs = [draw_duration(rng, 3.0, "pareto", pareto_alpha=3.0) for _ in range(20000)]
    x_m = 3.0 * 2 / 3  # mean (alpha - 1) / alpha
    assert min(xs) >= x_m
    assert statistics.median(xs) == pytest.approx(x_m * 2 ** (1 / 3), rel=0.03)


def test_run_for_really_spends_the_time():
    assert run_for(0.03, "sleep") >= 0.03
    assert run_for(0.03, "compute") >= 0.03


def _env(**kw) -> TimedBanditEnv:
    env = TimedBanditEnv(BanditOptions(time_scale=0.02, process=False, **kw))
    assert "<choice>fast</choice>" in env.reset(Task("t"), seed=3).messages[-1]["content"]
    return env


def test_a_choice_runs_for_its_drawn_duration_and_pays_its_reward():
    env = _env()
    r = env.step("<choice>slow</choice>")
    assert r.done and r.reward == 1.0 and r.info["arm"] == "slow" and r.solved
    assert r.duration >= r.info["planned_seconds"] > 0 and not r.malformed
    env.reset(Task("t"), seed=4)
    fast = env.step("fast")
    assert fast.reward == 0.3 and fast.solved is False and fast.metrics["arm_fast"] == 1.0


def test_the_seed_makes_the_durations_repeat():
    def planned(seed):
        env = _env()
        env.reset(Task("t"), seed)
        return env.step("slow").info["planned_seconds"]

    assert planned(7) == planned(7) != planned(8)


def test_unparsable_reply_ends_the_episode_malformed_with_reward_zero():
    env = _env()
    r = env.step("no idea")
    assert r.done and r.malformed and r.reward == 0.0 and r.duration == 0.0 and not r.failure


def test_fallback_arm_runs_but_the_turn_is_still_malformed():
    env = _env(fallback_arm="slow")
    r = env.step("gibberish")
    assert r.info["arm"] == "slow" and r.malformed and r.reward == 1.0


def test_multi_turn_episode_rewards_the_mean_arm_reward():
    env = _env(turns=2)
    first = env.step("fast")
    assert not first.done and first.reward == 0.3 and "Choose again" in first.observation
    last = env.step("slow")
    assert last.done and last.reward == pytest.approx(0.65)


def test_options_are_validated_naming_the_key():
    with pytest.raises(ConfigError, match=r"task\.options\.speed: unknown timed_bandit option"):
        load_config(None, ["task.name=timed_bandit", "task.options.speed=1"])
    with pytest.raises(ConfigError, match=r"task\.options\.arms\.fast\.seconds: Field required"):
        load_config(
            None,
            [
                "task.name=timed_bandit",
                "task.options.arms={fast: {reward: 1}, slow: {reward: 1, seconds: 1}}",
            ],
        )
    with pytest.raises(ConfigError, match=r"fallback_arm must be null, random or one of"):
        load_config(None, ["task.name=timed_bandit", "task.options.fallback_arm=medium"])
    with pytest.raises(ConfigError, match=r"unknown fault\(s\) \['nonsense'\]"):
        load_config(None, ["task.name=timed_bandit", "task.options.faults={nonsense: 1}"])
    opts = BanditOptions(arms={"a": {"reward": 0, "seconds": 1}, "b": {"reward": 1, "seconds": 2}})
    assert [a.name for a in opts.arm_list()] == ["a", "b"]


def test_suite_gives_process_envs_with_the_failure_reward():
    cfg = load_config(
        None,
        [
            "task.name=timed_bandit",
            "task.options.train_size=5",
            "task.options.eval_size=3",
            "rollout.failure_reward=-0.5",
            "task.options.time_scale=0.01",
        ],
    )
    suite = build_suite("timed_bandit", cfg.task.options, SuiteContext(0, -0.5))
    assert len(suite.train_tasks) == 5 and len(suite.eval_tasks) == 3
    env = suite.make_env(None)
    assert isinstance(env, ProcessEnv) and env.failure_reward == -0.5
    try:
        env.reset(suite.train_tasks[0], seed=1)
        assert env.step("<choice>fast</choice>").reward == 0.3
    finally:
        env.close()
