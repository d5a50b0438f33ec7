"""Section mode: the reply is the modelling section of a fixed script; the region is assembled
and parsed by `fill_template` with section-specific limits, and the fixed tail turns
`predictions` into submission.csv or stops with a message that says what was wrong.

The scripts run in-process here (tiny CSVs in a temp folder); the sandboxed, graded runs on
bundled competitions are in tests/envs/mle/test_section_mode.py."""

import os

import numpy as np
import pandas as pd
import pytest

from practicum.envs.mle.actions import prompts
from practicum.envs.mle.actions.parsing import ActionParseError
from practicum.envs.mle.actions.section import (
    MAX_LINES,
    parse_section,
    recover_prefix,
    section_template,
)
from practicum.envs.mle.actions.template import END_MARKER, START_MARKER

FENCE = "```"
LABELS = section_template("multiclass", "species", "id", "accuracy")
BINARY_AUC = section_template("binary", "sick", "id", "auc-roc")
MULTI_LOGLOSS = section_template("multiclass", "species", "id", "log-loss")
REGRESSION = section_template("regression", "price", "id", "rmse")
TEXT = section_template("text-classification", "chapter", "id", "macro-f1")
SECTION = """\
X = train[["a", "b"]]
X_test = test[["a", "b"]]
model = LogisticRegression(max_iter=500)
model.fit(X, train[TARGET])
predictions = {predict}
"""


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    n = 30
    train = pd.DataFrame({"id": range(n), "a": rng.normal(size=n), "b": rng.normal(size=n)})
    train["species"] = np.where(train.a > 0.3, "c", np.where(train.a > -0.3, "b", "a"))
    train["sick"] = (train.b > 0).astype(int)
    train["price"] = 3 * train.a + train.b
    test = pd.DataFrame({"id": range(100, 112), "a": rng.normal(size=12), "b": rng.normal(size=12)})
    train.to_csv(tmp_path / "train.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    return tmp_path


def run_in(folder, template, reply):
    """Fill, then exec the script in `folder`: the submission frame, or the SystemExit text."""
    script, written = parse_section(reply, template)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(script, "main.py", "exec"), {"__name__": "__main__"})
    except SystemExit as stop:
        return str(stop)
    finally:
        os.chdir(cwd)
    return pd.read_csv(folder / "submission.csv")


def test_every_task_type_gives_a_parsing_script_whose_example_is_its_region():
    for template in (LABELS, BINARY_AUC, MULTI_LOGLOSS, REGRESSION, TEXT):
        assert template.max_lines == MAX_LINES
        lines = template.script.splitlines()
        region = lines[lines.index(START_MARKER) + 1 : lines.index(END_MARKER)]
        assert "\n".join(region) == template.example
        assert parse_section(template.example, template)[0] == template.script
        assert "predictions" in template.instruction
    with pytest.raises(ValueError, match="unknown task_type"):
        section_template("ranking", "y", "id", "ndcg")


def test_the_section_replaces_the_region_and_the_fixed_parts_stay(folder):
    reply = f"Plan.\n{FENCE}python\n{SECTION.format(predict='model.predict(X_test)')}{FENCE}"
    script, written = parse_section(reply, LABELS)
    assert written == SECTION.format(predict="model.predict(X_test)").strip()
    assert 'train = pd.read_csv(DATA_DIR + "/train.csv")' in script  # fixed head
    assert 'submission.to_csv("submission.csv", index=False)' in script  # fixed tail
    assert "RandomForestClassifier(n_estimators=200" not in script  # the example is gone
    frame = run_in(folder, LABELS, reply)
    assert list(frame.columns) == ["id", "species"] and len(frame) == 12
    assert set(frame.species) <= {"a", "b", "c"}


@pytest.mark.parametrize(
    "reply, message",
    [
        ("", "empty"),
        ("I would use a random forest on the features.", "no ```python code block"),
        (f"{FENCE}python\n{START_MARKER}\npredictions = 1\n{END_MARKER}\n{FENCE}", "marker"),
        (
            f"{FENCE}python\n" + "x = 1\n" * MAX_LINES + f"predictions = x\n{FENCE}",
            f"{MAX_LINES + 1} lines; at most {MAX_LINES}",
        ),
        (f"{FENCE}python\npredictions = model.predict(X_test\n{FENCE}", "does not parse"),
        (f"{FENCE}python\nmodel = Ridge(alpha=\n", "cut off .* no complete statement"),
        ("Sure. predictions = model.predict(X_test) should work", "does not parse"),
    ],
)
def test_malformed_sections_say_what_to_fix(reply, message):
    with pytest.raises(ActionParseError, match=message):
        parse_section(reply, LABELS)


def test_a_cut_off_block_keeps_its_longest_parsing_prefix():
    cut = (
        f"Plan.\n{FENCE}python\nX = train[['a', 'b']]\nmodel = Ridge()\n"
        f"model.fit(X, train[TARGET])\npredictions = model.predict(X_te"
    )
    script, written = parse_section(cut, LABELS)
    assert written == "X = train[['a', 'b']]\nmodel = Ridge()\nmodel.fit(X, train[TARGET])"
    assert f"{START_MARKER}\n{written}\n{END_MARKER}" in script
    with pytest.raises(ActionParseError, match="not closed"):
        parse_section(cut, LABELS, salvage=False)
    # a closed block is the policy's as written: a syntax error there is malformed
    with pytest.raises(ActionParseError, match="does not parse"):
        parse_section(cut + f"\n{FENCE}", LABELS)
    long = "\n".join(f"x{i} = {i}" for i in range(40))
    assert recover_prefix(long, MAX_LINES) == "\n".join(f"x{i} = {i}" for i in range(MAX_LINES))
    assert recover_prefix("for i in range(3):\n", MAX_LINES) is None
    assert recover_prefix("# only a comment\nx = (", MAX_LINES) is None


def test_a_section_that_never_predicts_runs_and_stops_at_the_tail(folder):
    reply = SECTION.replace("predictions = {predict}\n", "")
    assert run_in(folder, LABELS, reply) == (
        "the section never assigned `predictions` (it must "
        "end with predictions = ..., one prediction per "
        "test row)"
    )


def test_predictions_of_the_wrong_length_stop_with_a_clear_message(folder):
    reply = SECTION.format(predict="model.predict(X)")  # the training rows
    assert run_in(folder, LABELS, reply) == (
        "`predictions` must have one row per test row (12 rows), got shape (30,)"
    )
    assert not (folder / "submission.csv").exists()


def test_binary_probabilities_take_the_second_class_in_either_shape(folder):
    both = run_in(folder, BINARY_AUC, SECTION.format(predict="model.predict_proba(X_test)"))
    one = run_in(folder, BINARY_AUC, SECTION.format(predict="model.predict_proba(X_test)[:, 1]"))
    assert list(both.columns) == ["id", "sick"] and np.allclose(both.sick, one.sick)
    assert ((0 <= one.sick) & (one.sick <= 1)).all()


def test_multiclass_probabilities_need_one_column_per_sorted_class(folder):
    frame = run_in(folder, MULTI_LOGLOSS, SECTION.format(predict="model.predict_proba(X_test)"))
    assert list(frame.columns) == ["id", "a", "b", "c"]
    assert np.allclose(frame[["a", "b", "c"]].sum(axis=1), 1.0)
    labels = run_in(folder, MULTI_LOGLOSS, SECTION.format(predict="model.predict(X_test)"))
    assert labels == (
        "`predictions` must have one column per class ['a', 'b', 'c'], got shape (12,)"
    )


def test_regression_accepts_a_column_vector_and_rejects_a_matrix(folder):
    reply = SECTION.replace("LogisticRegression(max_iter=500)", "Ridge()")
    frame = run_in(folder, REGRESSION, reply.format(predict="model.predict(X_test)[:, None]"))
    assert list(frame.columns) == ["id", "price"] and len(frame) == 12
    wide = run_in(folder, REGRESSION, reply.format(predict="np.ones((len(test), 2))"))
    assert wide == "`predictions` must hold one number per test row, got shape (12, 2)"


def test_section_prompt_shows_columns_sizes_and_the_target():
    columns = ["id", *(f"f{i}" for i in range(30)), "species"]
    text = prompts.section_prompt(
        "Iris", "Predict the species.", "accuracy", False, LABELS, columns, 105, 45, "species", "id"
    )
    assert "105 rows; columns: id, f0, f1" in text and "... (8 more)" in text
    assert "45 rows; the same columns without species" in text
    assert "TARGET = 'species'; ID_COL = 'id'" in text and "CLASSES" in text
    assert f"at most {MAX_LINES} lines" in text and text.endswith(prompts.SECTION_REPLY)
    assert "RandomForestClassifier" in text and "Ridge," not in text
    user, assistant = prompts.section_examples()
    assert user["role"] == "user" and "House prices" in user["content"]
    example = parse_section(assistant["content"], REGRESSION, salvage=False)[1]
    assert example.endswith("predictions = model.predict(X_test)")
