"""Red team: the private answers of a bundled competition cannot be looked up in its public
source data. Attack: a 1-nearest-neighbour model fitted on the FULL source dataset (train and
test rows, with their labels), as a policy that "augments with the public dataset" would.

Before the secret re-encoding it returns the test labels exactly; after, it must score no
better than an honest model fitted on train.csv (logistic regression / ridge / TF-IDF) or,
for regression, the best constant prediction: the re-encoding shifts every feature by many
standard deviations, so the lookup predicts a near-constant (one source row's label for almost
every test row), and under a skewed metric (RMSLE on counts) a well-placed constant can beat
ridge without any row's answer leaking. A 1% margin separates that from a lookup, which
recovers answers row by row (the un-encoded scores in EXACT)."""

import tempfile
from pathlib import Path

import pandas as pd
import pytest
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from practicum.envs.mle.competitions import mlebench_compat, source_data
from practicum.envs.mle.competitions.loading import bundled_dir
from practicum.envs.sandbox import Limits, run_python
from practicum.tasks.competitions.build_suite import (
    baseline_submission,
    classifier_zoo,
    regressor_zoo,
    text_zoo,
)

BUNDLED = sorted(p.name for p in bundled_dir().iterdir() if (p / "config.yaml").is_file())


EXACT = {
    "iris-species": 1.0,
    "breast-cancer-diagnosis": 1.0,
    "diabetes-progression": 0.0,
    "digits-recognition": 1.0,
    "wine-cultivar": 0.0,
    "python-docs-chapters": 1.0,
}
"""Competitions whose un-encoded answers the lookup returns exactly (perfect score)."""


def source_rows(comp) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every row of the public source with its labels, the un-encoded test.csv)."""
    with tempfile.TemporaryDirectory() as scratch:
        public, private = Path(scratch, "public"), Path(scratch, "private")
        public.mkdir()
        private.mkdir()
        mlebench_compat.load_callable(comp.root, comp.config["preparer"])(
            Path(scratch), public, private
        )
        train, test = pd.read_csv(public / "train.csv"), pd.read_csv(public / "test.csv")
        answers = pd.read_csv(private / "answers.csv")
    return pd.concat([train, test.merge(answers, on="id")], ignore_index=True), test


def lookup_model(comp):
    if comp.practicum.task == "text-classification":
        return text_zoo()["tfidf-knn-5"]().set_params(kneighborsclassifier__n_neighbors=1)
    return (
        KNeighborsRegressor(1) if comp.practicum.task == "regression" else KNeighborsClassifier(1)
    )


def honest_model(comp):
    task = comp.practicum.task
    if task == "text-classification":
        return text_zoo()["tfidf-logistic-c1"]()
    return (
        regressor_zoo()["ridge-a10"]()
        if task == "regression"
        else classifier_zoo()["logistic-c1"]()
    )


def best_constant(comp, train: pd.DataFrame, answers: pd.DataFrame) -> float | None:
    """Regression: the best score of one train-label value (up to 60 quantiles) predicted for
    every row; None for other tasks (their honest model is the floor)."""
    if comp.practicum.task != "regression":
        return None
    target = [c for c in answers.columns if c != "id"][0]
    values = train[target].quantile([i / 59 for i in range(60)]).unique()
    scores = [comp.grade(answers.assign(**{target: v}), answers) for v in values]
    return max(scores, key=lambda x: oriented(comp, x))


def oriented(comp, score: float) -> float:
    return -score if comp.lower_is_better else score


@pytest.mark.parametrize("cid", BUNDLED)
def test_lookup_in_the_public_source_scores_no_better_than_an_honest_model(cid, bundled_root):
    comp, paths = bundled_root(cid)
    source, raw_test = source_rows(comp)
    answers = pd.read_csv(paths.answers)
    train, test = pd.read_csv(paths.public / "train.csv"), pd.read_csv(paths.public / "test.csv")
    raw_answers = source.set_index("id").loc[raw_test["id"]].reset_index()
    before = comp.grade(
        baseline_submission(comp, lookup_model(comp), source, raw_test),
        raw_answers[answers.columns],
    )
    honest = comp.grade(baseline_submission(comp, honest_model(comp), train, test), answers)
    after = comp.grade(baseline_submission(comp, lookup_model(comp), source, test), answers)
    if cid in EXACT:  # the attack is real: on the un-encoded split it is perfect
        assert before == pytest.approx(EXACT[cid], abs=1e-9)
    constant = best_constant(comp, train, answers)
    floor = max(
        oriented(comp, honest), oriented(comp, constant) if constant is not None else -float("inf")
    )
    assert oriented(comp, after) <= floor + 0.01 * abs(floor), (before, honest, constant, after)


def test_the_source_data_files_are_unreadable_in_the_sandbox(tmp_path):
    code = (
        "import statsmodels.api, sklearn.ensemble\n"  # libraries still import
        "import sklearn.datasets as d, statsmodels.datasets.randhie as r, scipy, os\n"
        "def attempt(name, f):\n"
        "    try:\n"
        "        f(); print(name, 'READ')\n"
        "    except Exception as e:\n"
        "        print(name, 'blocked')\n"
        "attempt('iris', d.load_iris)\n"
        "attempt('diabetes', d.load_diabetes)\n"
        "attempt('randhie', r.load_pandas)\n"
        "attempt('pydoc', lambda: __import__('pydoc_data.topics').topics.topics)\n"
        "attempt('scipy-iris',\n"
        "        lambda: open(scipy.__path__[0] + '/spatial/tests/data/iris.txt').read(1))\n"
        "attempt('key',\n"
        "        lambda: open(os.path.expanduser('~root/.cache/practicum/mle-secret')).read(1))\n"
    )
    result = run_python(
        code, tmp_path, Limits(wall_seconds=60), hidden_paths=source_data.hidden_paths()
    )
    assert result.ok, result.stderr
    lines = result.stdout.split("\n")
    assert [ln for ln in lines if ln.endswith("blocked")] == [
        f"{n} blocked" for n in ("iris", "diabetes", "randhie", "pydoc", "scipy-iris", "key")
    ]


def test_the_encoding_is_secret_and_recorded_by_fingerprint(tmp_path, monkeypatch):
    from practicum.envs.mle.competitions.loading import load_competition

    comp = load_competition("iris-species")
    monkeypatch.setenv("PRACTICUM_MLE_SECRET", "01" * 16)
    first = pd.read_csv(comp.prepare(tmp_path).public / "train.csv")
    monkeypatch.setenv("PRACTICUM_MLE_SECRET", "02" * 16)
    second = pd.read_csv(comp.prepare(tmp_path).public / "train.csv")  # a new key: re-prepared
    assert not first["sepal_length"].equals(second["sepal_length"])
    assert (first["species"] != second["species"]).any() or True  # labels may coincide
    assert "secret" in comp.description
