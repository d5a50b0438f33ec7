import math

import pytest

from practicum.envs.mle.credit.milestones import MILESTONES
from practicum.envs.mle.credit.rewards import RewardConfig, mle_reward, orient_score

ALL = list(MILESTONES)


def test_total_failure_is_minus_ten():
    r = mle_reward([], valid=False, score=None, lower_is_better=False)
    assert (
        r.total == -10.0
        and r.failure == -10.0
        and r.milestone_credit == 0.0
        and r.score_credit == 0.0
    )


def test_failure_with_milestones_counts_each_distinct_one_once():
    r = mle_reward(
        ["libraries_imported", "data_loaded", "data_loaded", "model_built"], False, None, False
    )
    assert r.milestone_credit == pytest.approx(0.3)
    assert r.total == pytest.approx(-9.7)
    assert r.details["milestones"] == ["libraries_imported", "data_loaded", "model_built"]


def test_invalid_run_ignores_a_score_it_was_given():
    assert mle_reward(["data_loaded"], False, 0.9, False).total == pytest.approx(-9.9)


def test_valid_submission_earns_score_plus_milestones():
    r = mle_reward(ALL, valid=True, score=0.85, lower_is_better=False)
    assert r.failure == 0.0 and r.score_credit == 0.85
    assert r.total == pytest.approx(0.85 + 0.7)


def test_lower_is_better_negated_by_default():
    r = mle_reward(ALL[:5], valid=True, score=0.4, lower_is_better=True)
    assert r.score_credit == pytest.approx(-0.4)
    assert r.total == pytest.approx(0.1)


def test_exp_and_inverse_transforms():
    exp = RewardConfig(lower_is_better_transform="exp", partial_credit=False)
    inv = RewardConfig(lower_is_better_transform="inverse", beta=3.0, partial_credit=False)
    assert mle_reward(ALL, True, 3.0, True, exp).total == pytest.approx(math.exp(-1))
    assert mle_reward(ALL, True, 3.0, True, inv).total == pytest.approx(0.5)
    assert orient_score(6.0, True, "inverse", beta=2.0) == pytest.approx(0.25)
    assert orient_score(0.7, False, "exp") == 0.7


def test_partial_credit_ablation_zeroes_milestones():
    cfg = RewardConfig(partial_credit=False)
    assert mle_reward(ALL, False, None, False, cfg).total == -10.0
    assert mle_reward(ALL, True, 0.5, False, cfg).total == 0.5


def test_any_valid_run_beats_every_invalid_one_with_defaults():
    best_invalid = mle_reward(ALL, False, None, True).total
    worst_valid = mle_reward([], True, 9.0, True).total  # log-loss 9 is awful
    assert worst_valid > best_invalid


def test_custom_credit_and_failure():
    cfg = RewardConfig(failure_reward=-1.0, milestone_credit=0.25)
    assert mle_reward(ALL[:2], False, None, False, cfg).total == pytest.approx(-0.5)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="finite score"):
        mle_reward([], True, None, False)
    with pytest.raises(ValueError, match="finite score"):
        mle_reward([], True, float("nan"), False)
    with pytest.raises(ValueError, match="unknown milestones \\['trained'\\]"):
        mle_reward(["trained"], False, None, False)
    with pytest.raises(ValueError, match="lower_is_better_transform"):
        RewardConfig(lower_is_better_transform="log")
    with pytest.raises(ValueError, match="beta"):
        RewardConfig(beta=0)
