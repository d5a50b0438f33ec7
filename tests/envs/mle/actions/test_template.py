"""Template mode: a reply fills one region of a fixed script; the default scikit-learn
templates run end to end; `parse_reply` handles both modes."""

import textwrap

import numpy as np
import pandas as pd
import pytest

from practicum.envs.mle.actions.parsing import ActionParseError
from practicum.envs.mle.actions.sklearn_template import default_template
from practicum.envs.mle.actions.template import (
    END_MARKER,
    START_MARKER,
    Template,
    fill_template,
    parse_reply,
)

FENCE = "```"


NESTED = Template(
    script=textwrap.dedent(f"""\
        def make():
            {START_MARKER}
            model = None
            {END_MARKER}
            return model
        """),
    instruction="assign `model`",
    max_lines=3,
)


def test_fill_template_reindents_a_fenced_reply():
    reply = f"Use a list.\n{FENCE}python\n        model = [1,\n           2]\n{FENCE}"
    script = fill_template(NESTED, reply)
    namespace: dict = {}
    exec(script, namespace)
    assert namespace["make"]() == [1, 2]
    assert "\n    model = [1,\n       2]\n" in script


def test_fill_template_accepts_a_bare_reply():
    script = fill_template(NESTED, "model = 7\n")
    namespace: dict = {}
    exec(script, namespace)
    assert namespace["make"]() == 7


def test_fill_template_rejects_markers():
    reply = f"{FENCE}python\n{START_MARKER}\nmodel = 1\n{END_MARKER}\n{FENCE}"
    with pytest.raises(ActionParseError, match="marker"):
        fill_template(NESTED, reply)


def test_fill_template_rejects_long_code():
    with pytest.raises(ActionParseError, match="4 lines; at most 3"):
        fill_template(NESTED, "a = 1\nb = 2\nc = 3\nmodel = a\n")


def test_fill_template_requires_model():
    with pytest.raises(ActionParseError, match="must assign `model`"):
        fill_template(NESTED, "clf = 1")


def test_fill_template_bare_prose_is_rejected():
    with pytest.raises(ActionParseError, match="does not parse"):
        fill_template(NESTED, "I think a random forest is best")


def test_template_checks_its_markers():
    with pytest.raises(ValueError, match="exactly once"):
        Template(script="x = 1\n", instruction="")


def test_default_template_rejects_unknown_task_type():
    with pytest.raises(ValueError, match="unknown task_type 'clustering'"):
        default_template("clustering", "y", "id", "accuracy")


def _write_data(folder, kind: str) -> None:
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame(
        {
            "id": np.arange(n),
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "color": rng.choice(["red", "blue", None], size=n),
        }
    )
    df.loc[::7, "b"] = np.nan
    signal = df["a"] + df["b"].fillna(0)
    if kind == "binary":
        df["target"] = (signal > 0).astype(int)
    elif kind == "multiclass":
        df["target"] = np.select([signal < -0.5, signal < 0.5], ["low", "mid"], "high")
    elif kind == "regression":
        df["target"] = 2 * signal + rng.normal(scale=0.1, size=n)
    else:  # text
        words = {0: "dull boring slow", 1: "great fun lovely"}
        df["text"] = [f"{words[int(s > 0)]} movie number {i}" for i, s in enumerate(signal)]
        df["target"] = (signal > 0).astype(int)
        df = df[["id", "text", "target"]]
    df.iloc[:90].to_csv(folder / "train.csv", index=False)
    df.iloc[90:].drop(columns="target").to_csv(folder / "test.csv", index=False)


CASES = {  # kind -> (task_type, metric, region reply, expected submission columns)
    "binary": (
        "binary",
        "auc-roc",
        "model = RandomForestClassifier(n_estimators=20, random_state=0)",
        ["id", "target"],
    ),
    "multiclass": (
        "multiclass",
        "multi-class-log-loss",
        "model = LogisticRegression(max_iter=500)",
        ["id", "high", "low", "mid"],
    ),
    "regression": ("regression", "rmse", "model = Ridge(alpha=1.0)", ["id", "target"]),
    "text": (
        "text-classification",
        "accuracy",
        f"{FENCE}python\nmodel = LinearSVC()\n{FENCE}",
        ["id", "target"],
    ),
}


def test_default_templates_run_end_to_end(tmp_path, run_scripts):
    folders = []
    for kind, (task_type, metric, reply, _) in CASES.items():
        folder = tmp_path / kind
        folder.mkdir()
        _write_data(folder, kind)
        script = fill_template(default_template(task_type, "target", "id", metric), reply)
        (folder / "main.py").write_text(script)
        folders.append(folder)
    results = run_scripts(folders)
    for kind, folder in zip(CASES, folders):
        ok, out = results[folder]
        assert ok, out
        submission = pd.read_csv(folder / "submission.csv")
        assert list(submission.columns) == CASES[kind][3]
        assert submission["id"].tolist() == list(range(90, 120))
        assert "validation" in out
        if kind == "binary":
            assert submission["target"].between(0, 1).all() and submission["target"].nunique() > 2
        if kind == "multiclass":
            assert np.allclose(submission[["high", "low", "mid"]].sum(axis=1), 1.0)
        if kind == "text":
            assert set(submission["target"]) <= {0, 1}


def test_probability_metric_wraps_models_without_predict_proba():
    script = fill_template(default_template("binary", "y", "id", "auc"), "model = LinearSVC()")
    assert "CalibratedClassifierCV(model" in script
    assert (
        "CalibratedClassifierCV(model"
        not in default_template("binary", "y", "id", "accuracy").script
    )


def test_text_template_offers_only_sparse_friendly_estimators():
    text = default_template("text_classification", "y", "id", "accuracy")
    assert (
        "MultinomialNB" in text.available and "HistGradientBoostingClassifier" not in text.available
    )
    assert "TfidfVectorizer(" in text.script


def test_parse_reply_script_mode_returns_the_script_and_plan():
    script, written, plan = parse_reply(f"Plan.\n{FENCE}python\nx = 1\n{FENCE}", None)
    assert script == written == "x = 1\n" and plan == "Plan."


def test_parse_reply_template_mode_fills_the_region_and_salvages_a_lone_line():
    reply = "Sure: `model = Ridge()` works well."
    script, written, plan = parse_reply(reply, NESTED)
    assert written == "model = Ridge()" and "    model = Ridge()" in script and plan == ""
    with pytest.raises(ActionParseError):
        parse_reply(reply, NESTED, salvage=False)
