"""The timed bandit: choices parse, durations are heavy-tailed with the right mean and really
elapse, failures are defined, options are validated."""

import random
import statistics

import pytest

from practicum.config import load_config
from practicum.envs.base import Task
from practicum.envs.process_env import ProcessEnv
from practicum.envs.timed_bandit import (
    BanditSpec,
    TimedBanditEnv,
    draw_duration,
    parse_choice,
    run_for,
)
from practicum.suites import load_suite


def test_parse_choice_tag_word_and_ambiguity():
    names = ["fast", "slow"]
    assert parse_choice("I pick <choice> Slow </choice>.", names) == "slow"
    assert parse_choice("fast please", names) == "fast"
    assert parse_choice("<choice>medium</choice>", names) is None
    assert parse_choice("fast or slow?", names) is None
    assert parse_choice("faster", names) is None


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
    env = TimedBanditEnv(BanditSpec(time_scale=0.02, process=False, **kw), seed=3)
    assert "<choice>fast</choice>" in env.reset(Task("t"))
    return env


def test_a_choice_runs_for_its_drawn_duration_and_pays_its_reward():
    env = _env()
    r = env.step("<choice>slow</choice>")
    assert r.done and r.reward == 1.0 and r.info["arm"] == "slow"
    assert r.duration >= r.info["planned_seconds"] > 0
    env.reset(Task("t"))
    assert env.step("fast").reward == 0.3


def test_unparsable_reply_ends_the_episode_as_a_failure_with_the_failure_reward():
    env = TimedBanditEnv(BanditSpec(process=False, failure_reward=-1.0))
    env.reset(Task("t"))
    r = env.step("no idea")
    assert r.done and r.reward == -1.0 and r.duration == 0.0
    assert r.info["failure"].startswith("unparsable action")


def test_fallback_arm_runs_instead_of_failing():
    env = _env(fallback_arm="slow")
    r = env.step("gibberish")
    assert r.info == {**r.info, "fallback": True, "arm": "slow"} and "failure" not in r.info


def test_multi_turn_episode_rewards_the_mean_arm_reward():
    env = _env(turns=2)
    first = env.step("fast")
    assert not first.done and first.reward == 0.3 and "Choose again" in first.observation
    last = env.step("slow")
    assert last.done and last.reward == pytest.approx(0.65)


def test_options_are_validated_naming_the_key():
    with pytest.raises(ValueError, match=r"task\.options\.speed: unknown"):
        BanditSpec.from_options({"speed": 1})
    with pytest.raises(ValueError, match=r"task\.options\.arms\.fast"):
        BanditSpec.from_options({"arms": {"fast": {"reward": 1}}})
    with pytest.raises(ValueError, match=r"task\.options\.fallback_arm"):
        BanditSpec.from_options({"fallback_arm": "medium"})
    spec = BanditSpec.from_options({"arms": {"a": {"reward": 0, "seconds": 1},
                                             "b": {"reward": 1, "seconds": 2}}})
    assert [a.name for a in spec.arms] == ["a", "b"]


def test_suite_gives_process_envs_with_distinct_seeds():
    cfg = load_config(None, ["task.name=timed_bandit", "task.train_size=5", "task.eval_size=3",
                             "rollout.failure_reward=-0.5", "task.options={time_scale: 0.01}"])
    suite = load_suite(cfg)
    assert len(suite.train_tasks) == 5 and len(suite.eval_tasks) == 3
    a, b = suite.make_env(), suite.make_env()
    assert isinstance(a, ProcessEnv) and a.failure_reward == -0.5
    assert a.factory.args[1] != b.factory.args[1]  # per-episode seeds
    try:
        a.reset(suite.train_tasks[0])
        assert a.step("<choice>fast</choice>").reward == 0.3
    finally:
        a.close()
