"""Section mode end to end on bundled competitions (real prepared data, sandboxed runs, rule
instrumenter, evidence-checked milestones, the env's default leaderboard-normalised reward):
milestones separate further progress from less.

    honest section (7 milestones, valid)
      > fits and scores but predicts the training rows (6, the tail stops it)
      > fails at its first line (2: the fixed script's imports and data loading)

One competition per kind of output: class labels (iris), a binary probability scored by AUC
(breast cancer), numbers (diabetes)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from practicum.engine.service import ModelService
from practicum.envs.base import Task
from practicum.envs.mle.actions import prompts
from practicum.envs.mle.credit.milestones import MILESTONES
from practicum.envs.mle.suite import MleOptions, mle_suite
from practicum.envs.registry import SuiteContext

COMPETITIONS = {  # competition -> (estimator, what `predictions` is, validation scorer)
    "iris-species": (
        "LogisticRegression(max_iter=2000)",
        "model.predict({X})",
        "accuracy_score(y_val, model.predict(X_val))",
    ),
    "breast-cancer-diagnosis": (
        "RandomForestClassifier(n_estimators=50, random_state=0)",
        "model.predict_proba({X})[:, 1]",
        "roc_auc_score(y_val, model.predict_proba(X_val)[:, 1])",
    ),
    "diabetes-progression": (
        "Ridge(alpha=1.0)",
        "model.predict({X})",
        "mean_squared_error(y_val, model.predict(X_val)) ** 0.5",
    ),
}
HONEST = """\
features = [c for c in train.columns if c not in (TARGET, ID_COL)]
X = train[features]
X_test = test[features]
X_tr, X_val, y_tr, y_val = train_test_split(X, train[TARGET], test_size=0.25, random_state=0)
model = {estimator}
model.fit(X_tr, y_tr)
print("validation:", {scorer})
model.fit(X, train[TARGET])
predictions = {predict}
"""
FIRST_LINE_FAILS = """\
X = train[["feature_1", "feature_2"]]
X_test = test[["feature_1", "feature_2"]]
model = {estimator}
model.fit(X, train[TARGET])
predictions = {predict}
"""


@pytest.fixture(scope="module")
def suite(bundled_root):
    bundled_root("iris-species")  # the session's prepared data root
    opts = MleOptions(
        mode="section",
        instrumenter="rules",
        held_out=list(COMPETITIONS),
        train=["wine-cultivar"],
        data_root=str(bundled_root.root),
        wall_seconds=60,
    )
    return mle_suite(opts, SuiteContext(failure_reward=-5.0))


def step(suite, cid, code):
    env = suite.make_env(ModelService())
    start = env.reset(Task(cid, {"competition": cid, "split": "eval"}), seed=0)
    try:
        return start, env.step(f"Plan: a simple model.\n```python\n{code}```"), env.last_outcome
    finally:
        env.close()


@pytest.mark.parametrize("cid", sorted(COMPETITIONS))
def test_further_progress_earns_more(suite, cid):
    estimator, predict, scorer = COMPETITIONS[cid]
    honest = HONEST.format(estimator=estimator, scorer=scorer, predict=predict.format(X="X_test"))
    train_rows = honest.replace(predict.format(X="X_test"), predict.format(X="X"))
    first = FIRST_LINE_FAILS.format(estimator=estimator, predict=predict.format(X="X_test"))
    with ThreadPoolExecutor(3) as pool:  # three sandboxes at once: the test's time is one run
        runs = list(pool.map(lambda code: step(suite, cid, code), (honest, train_rows, first)))
    (start, good, good_out), (_, further, further_out), (_, less, less_out) = runs
    print(cid, good.reward, further.reward, less.reward)
    assert good_out.valid and good_out.milestones == list(MILESTONES)
    assert good.reward > 0.7  # a real model: well above the no-ML level (0) + milestones
    assert not further_out.valid and further_out.milestones == list(MILESTONES)[:6]
    assert "must have one row per test row" in further.observation  # the tail says why
    assert less_out.milestones == ["libraries_imported", "data_loaded"]
    assert "KeyError" in less.observation
    assert good.reward > further.reward > less.reward
    assert further.reward - less.reward == pytest.approx(0.4)  # 4 more milestones
    # the prompt: one few-shot exchange, then the competition with its real columns
    roles = [m["role"] for m in start.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert start.messages[0]["content"] == prompts.SECTION_SYSTEM_PROMPT
    columns = suite.make_env.competitions[cid].columns
    assert ", ".join(columns[:3]) in start.messages[-1]["content"]


def test_malformed_reply_is_not_run_and_a_cut_off_one_runs_its_prefix(suite):
    _, result, outcome = step(suite, "iris-species", "")
    assert result.malformed and outcome.parse_error == "the code block is empty"
    assert "ending with `predictions = ...`" in result.observation
    env = suite.make_env(ModelService())
    env.reset(Task("iris-species", {"competition": "iris-species", "split": "eval"}), seed=0)
    cut = (
        "```python\nX = train[[c for c in train.columns if c not in (TARGET, ID_COL)]]\n"
        "model = LogisticRegression(max_iter=2000)\nmodel.fit(X, train[TARGET])\n"
        "predictions = model.predict(X_te"
    )  # the token budget ran out here
    try:
        result = env.step(cut)
    finally:
        env.close()
    assert not result.malformed and env.last_outcome.milestones == list(MILESTONES)[:5]
    assert "never assigned `predictions`" in result.observation
    assert result.reward == pytest.approx(-10 + 0.5)
