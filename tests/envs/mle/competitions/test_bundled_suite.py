"""The bundled suite: every competition loads, prepares deterministically, and a small
scikit-learn solution gets a valid, plausible score."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from practicum.envs.mle.competitions.competition import Competition
from practicum.envs.mle.competitions.grading import grade_submission
from practicum.envs.mle.competitions.loading import bundled_dir, list_competitions, load_competition
from practicum.envs.mle.competitions.prepared_data import tree_checksums
from practicum.tasks.competitions.build_suite import baseline_submission

BUNDLED = sorted(p.name for p in bundled_dir().iterdir() if (p / "config.yaml").is_file())

# What a small linear model should reach (loose: a sanity range, not a benchmark).
PLAUSIBLE = {
    "iris-species": 0.85,  # accuracy >=
    "wine-cultivar": 0.3,  # log loss <=
    "breast-cancer-diagnosis": 0.95,  # AUC >=
    "digits-recognition": 0.9,  # accuracy >=
    "diabetes-progression": 65.0,  # RMSE <=
    "marital-affairs": 0.6,  # log loss <=
    "health-insurance-visits": 0.9,  # RMSLE <=
    "school-math-pass-rate": 0.08,  # MAE <=
    "election-vote-1996": 0.85,  # accuracy >=
    "travel-mode-choice": 0.6,  # accuracy >=
    "python-docs-chapters": 0.5,  # macro F1 >=
}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mle-data")


def test_suite_covers_the_required_kinds_of_task():
    comps = [c for c in list_competitions() if c.root.parent == bundled_dir()]
    assert len(comps) >= 10 and sorted(c.id for c in comps) == sorted(PLAUSIBLE)
    tasks = {c.practicum.task for c in comps}
    assert {"binary", "multiclass", "regression", "text-classification"} <= tasks
    lower = {c.metric for c in comps if c.lower_is_better}
    assert len(lower) >= 2 and {"rmse", "log-loss", "mae"} & lower
    rows = [c.practicum.rows for c in comps]
    assert min(rows) >= 150 and max(rows) <= 21000 and max(rows) >= 10000


@pytest.mark.parametrize("cid", BUNDLED)
def test_bundled_folder_is_complete(cid):
    comp = load_competition(cid)
    for name in (
        "config.yaml",
        "description.md",
        "prepare.py",
        "grade.py",
        "leaderboard.csv",
        "checksums.yaml",
    ):
        assert (comp.root / name).is_file(), name
    assert comp.leaderboard and len(comp.leaderboard) >= 10
    assert comp.practicum.direction == ("lower" if comp.lower_is_better else "higher")
    for column in comp.practicum.submission_columns:  # the description tells the format
        assert f"`{column}`" in comp.description or f"{column}," in comp.description
    assert "## Metric" in comp.description and "## Submission format" in comp.description
    assert comp.config["dataset"]["answers"] == f"{cid}/prepared/private/answers.csv"


@pytest.mark.parametrize("cid", BUNDLED)
def test_preparation_is_deterministic(cid, data_root, tmp_path):
    comp = load_competition(cid)
    first = comp.prepare(data_root)  # verifies checksums.yaml on the way
    second = comp.prepare(tmp_path)
    assert tree_checksums(first.public, first.private) == tree_checksums(
        second.public, second.private
    )
    # checksums.yaml is of prepare.py's own output; the secret re-encoding comes after it
    assert comp.practicum.secret_transform
    assert tree_checksums(first.public, first.private) != comp.expected_checksums()
    train, test = pd.read_csv(first.public / "train.csv"), pd.read_csv(first.public / "test.csv")
    answers = pd.read_csv(first.answers)
    targets = comp.practicum.target_columns
    assert set(targets) <= set(train.columns) and not set(targets) & set(test.columns)
    assert list(answers.columns) == ["id", *targets] and len(answers) == len(test)
    assert not set(train["id"]) & set(test["id"])
    assert len(train) + len(test) == comp.practicum.rows


def solve(comp: Competition, public: Path, out: Path) -> Path:
    """A short script of the kind an agent should write: read, fit a linear model, write (in the
    format the leaderboard's baselines use)."""
    train, test = pd.read_csv(public / "train.csv"), pd.read_csv(public / "test.csv")
    if comp.practicum.task == "text-classification":
        model = make_pipeline(TfidfVectorizer(), LinearSVC())
    else:
        linear = (
            Ridge() if comp.practicum.task == "regression" else LogisticRegression(max_iter=2000)
        )
        model = make_pipeline(StandardScaler(), linear)
    baseline_submission(comp, model, train, test).to_csv(out, index=False)
    return out


@pytest.mark.parametrize("cid", BUNDLED)
def test_simple_solution_scores_plausibly(cid, data_root, tmp_path):
    comp = load_competition(cid)
    paths = comp.prepare(data_root)
    report = grade_submission(
        comp, solve(comp, paths.public, tmp_path / "submission.csv"), data_root
    )
    assert report.valid, report.reason
    sample = grade_submission(comp, paths.sample_submission, data_root)
    assert sample.valid, sample.reason
    bound = PLAUSIBLE[cid]
    if comp.lower_is_better:
        assert report.score <= bound and report.score < sample.score
    else:
        assert report.score >= bound and report.score > sample.score
    assert sample.medal is None  # the trivial guess never earns a medal


@pytest.mark.parametrize("cid", ["iris-species", "wine-cultivar", "health-insurance-visits"])
def test_bundled_graders_reject_malformed_submissions(cid, data_root, tmp_path):
    comp = load_competition(cid)
    paths = comp.prepare(data_root)
    sample = pd.read_csv(paths.sample_submission)
    target = comp.practicum.submission_columns[-1]
    cases = {
        "missing column": sample.drop(columns=target),
        "has 1 row but": sample.iloc[:1],
        "do not match the test set": sample.assign(id=sample["id"] + 100000),
        "missing value": sample.assign(**{target: np.nan}),
    }
    if comp.metric != "accuracy":
        cases["must be numeric"] = sample.assign(**{target: "lots"})
    if comp.metric == "log-loss":
        cases["probabilities in [0, 1]"] = sample.assign(**{target: 1.7})
    if comp.metric == "rmsle":
        cases["must be >= 0"] = sample.assign(**{target: -1.0})
    for expected, frame in cases.items():
        path = tmp_path / "submission.csv"
        frame.to_csv(path, index=False)
        report = grade_submission(comp, path, data_root)
        assert not report.valid and expected in report.reason, (expected, report.reason)
