"""Reward that honest work wins, on every bundled competition (real prepared data, real
graders, the env's reward with leaderboard-normalised scores):

    invalid run (any milestones)  <  no-ML constant submission  <  honest simple model
                                  <  better model

The no-ML run is credited every milestone a constant-writing script can prove (imports, data
loaded, features, a validation score, predictions written: 5); honest runs all 7."""

import pandas as pd
import pytest

from practicum.envs.mle.competitions.loading import bundled_dir
from practicum.envs.mle.credit.milestones import MILESTONES
from practicum.envs.mle.credit.rewards import RewardConfig, mle_reward
from practicum.envs.mle.episode_data import score_anchors
from practicum.tasks.competitions.build_suite import (
    baseline_submission,
    classifier_zoo,
    regressor_zoo,
    text_zoo,
)

BUNDLED = sorted(p.name for p in bundled_dir().iterdir() if (p / "config.yaml").is_file())
PAIRS = {  # competition -> (honest simple model, better model), from the baseline zoo
    "breast-cancer-diagnosis": ("tree-depth2", "logistic-c1"),
    "diabetes-progression": ("tree-depth3", "ridge-a10"),
    "digits-recognition": ("tree-depth5", "logistic-c1"),
    "election-vote-1996": ("knn-1", "logistic-c0.01"),
    "health-insurance-visits": ("ridge-a10", "tree-full"),
    "iris-species": ("logistic-c0.01", "logistic-c100"),
    "marital-affairs": ("naive-bayes", "logistic-c1"),
    "python-docs-chapters": ("tfidf-naive-bayes", "tfidf-svm"),
    "school-math-pass-rate": ("tree-depth3", "ridge-a10"),
    "travel-mode-choice": ("tree-depth2", "tree-depth5"),
    "wine-cultivar": ("logistic-c0.01", "logistic-c1"),
}
CFG = RewardConfig(score_scale="leaderboard")  # MleOptions' default
NO_ML_MILESTONES = [
    "libraries_imported",
    "data_loaded",
    "features_prepared",
    "validation_scored",
    "predictions_written",
]


def zoo(comp):
    task = comp.practicum.task
    if task == "text-classification":
        return text_zoo()
    return regressor_zoo() if task == "regression" else classifier_zoo()


def test_pairs_cover_every_bundled_competition():
    assert sorted(PAIRS) == BUNDLED


@pytest.mark.parametrize("cid", BUNDLED)
def test_honest_work_out_earns_no_ml_and_better_models_earn_more(cid, bundled_root):
    comp, paths = bundled_root(cid)
    answers = pd.read_csv(paths.answers)
    train, test = pd.read_csv(paths.public / "train.csv"), pd.read_csv(paths.public / "test.csv")
    anchors = score_anchors(comp, paths, answers)
    assert anchors is not None

    def reward(score, milestones, valid=True):
        return mle_reward(milestones, valid, score, comp.lower_is_better, CFG, anchors).total

    no_ml = comp.grade(paths.sample_submission, answers)
    simple_name, better_name = PAIRS[cid]
    scores = {
        name: comp.grade(baseline_submission(comp, zoo(comp)[name](), train, test), answers)
        for name in (simple_name, better_name)
    }
    all_7 = list(MILESTONES)
    rewards = {
        "invalid": reward(None, all_7, valid=False),
        "no-ML": reward(no_ml, NO_ML_MILESTONES),
        "simple": reward(scores[simple_name], all_7),
        "better": reward(scores[better_name], all_7),
    }
    print(cid, {k: round(v, 3) for k, v in rewards.items()}, no_ml, scores)
    assert rewards["invalid"] < rewards["no-ML"] < rewards["simple"] < rewards["better"], rewards
    assert reward(no_ml, []) == pytest.approx(0.0, abs=1e-9)  # the no-ML level is 0
    # real differences stay visible: the better model earns clearly more
    assert rewards["better"] - rewards["simple"] > 0.05


def test_normalisation_is_monotone_and_bounded_for_both_directions():
    from practicum.envs.mle.credit.rewards import normalise_score

    assert normalise_score(0.9, (0.3, 0.9)) == 1.0 and normalise_score(0.3, (0.3, 0.9)) == 0.0
    assert normalise_score(60.0, (90.0, 60.0)) == 1.0 and normalise_score(75.0, (90.0, 60.0)) == 0.5
    assert normalise_score(1e9, (90.0, 60.0)) == -1.0  # a valid run never falls below -1
    assert normalise_score(-5.0, (90.0, 60.0)) == 2.0


def test_raw_scale_keeps_the_papers_orientation():
    raw = mle_reward([], True, 58.0, True, RewardConfig(), (90.0, 58.0))
    assert raw.score_credit == -58.0 and raw.details["transform"] == "negate"
    normed = mle_reward([], True, 58.0, True, CFG, (90.0, 58.0))
    assert normed.score_credit == 1.0 and normed.details["transform"] == "leaderboard"
