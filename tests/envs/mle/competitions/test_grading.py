"""Metrics against hand-computed values; submission checks reject bad input with reasons."""

import math

import numpy as np
import pandas as pd
import pytest

from practicum.envs.mle.competitions.metrics import (
    accuracy,
    average_ranks,
    binary_log_loss,
    log_loss,
    macro_f1,
    mae,
    metric_lower_is_better,
    rmse,
    rmsle,
    roc_auc,
)
from practicum.envs.mle.competitions.submission_checks import (
    InvalidSubmissionError,
    align_submission,
    check_probabilities,
    normalise_keys,
    numeric_values,
    one_hot,
)

# --- metrics -------------------------------------------------------------------------------


def test_accuracy_counts_exact_matches():
    assert accuracy(["a", "b", "c", "a"], ["a", "b", "a", "b"]) == 0.5


def test_macro_f1_averages_classes_equally():
    # class a: TP=1 FP=0 FN=1 -> 2/3; class b: TP=1 FP=1 FN=0 -> 2/3; c: TP=1 -> 1
    assert macro_f1(["a", "a", "b", "c"], ["a", "b", "b", "c"]) == pytest.approx(
        (2 / 3 + 2 / 3 + 1) / 3
    )


def test_rmse_and_mae():
    assert rmse([0, 0], [3, 4]) == pytest.approx(math.sqrt(12.5))
    assert mae([0, 0], [3, -4]) == 3.5


def test_rmsle_uses_log1p_and_rejects_negatives():
    assert rmsle([0, math.e - 1], [0, 0]) == pytest.approx(math.sqrt(0.5))
    with pytest.raises(ValueError):
        rmsle([1], [-1])


def test_log_loss_renormalises_rows_and_clips():
    y = np.array([[1, 0], [0, 1]])
    # row 1: 0.5/(0.5+0.5) -> -log 0.5; row 2: 3/(1+3) = 0.75 -> -log 0.75
    assert log_loss(y, np.array([[0.5, 0.5], [1.0, 3.0]])) == pytest.approx(
        (math.log(2) - math.log(0.75)) / 2
    )
    assert log_loss(np.array([[1, 0]]), np.array([[0.0, 1.0]])) == pytest.approx(-math.log(1e-15))


def test_binary_log_loss():
    assert binary_log_loss([1, 0], [0.8, 0.4]) == pytest.approx(
        -(math.log(0.8) + math.log(0.6)) / 2
    )


def test_roc_auc_counts_ties_as_half():
    # pairs (pos, neg): (0.9, 0.1) win, (0.9, 0.5) win, (0.5, 0.1) win, (0.5, 0.5) tie -> 3.5 / 4
    assert roc_auc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == 0.875
    assert roc_auc([0, 1], [0.2, 0.1]) == 0.0
    with pytest.raises(ValueError):
        roc_auc([1, 1], [0.2, 0.3])


def test_average_ranks_share_ties():
    assert average_ranks(np.array([10.0, 20.0, 20.0, 5.0])).tolist() == [2.0, 3.5, 3.5, 1.0]


def test_metrics_agree_with_scikit_learn_on_random_data():
    from sklearn import metrics

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    pred = np.where(rng.random(200) < 0.6, y, rng.integers(0, 3, 200))
    proba = rng.dirichlet(np.ones(3), 200)
    score = rng.integers(0, 10, 200) / 9  # many ties
    assert macro_f1(y, pred) == pytest.approx(metrics.f1_score(y, pred, average="macro"))
    assert log_loss(np.eye(3)[y], proba) == pytest.approx(metrics.log_loss(y, proba))
    assert roc_auc(y == 1, score) == pytest.approx(metrics.roc_auc_score(y == 1, score))


def test_metric_directions():
    assert metric_lower_is_better("RMSE") is True
    assert metric_lower_is_better("log_loss") is True
    assert metric_lower_is_better("auc") is False
    assert metric_lower_is_better("accuracy") is False
    assert metric_lower_is_better("bleu-ish") is None


def test_one_hot_and_unknown_label():
    assert one_hot(["b", "a"], ["a", "b"]).tolist() == [[0, 1], [1, 0]]
    with pytest.raises(ValueError, match="not among the classes"):
        one_hot(["z"], ["a", "b"])


def test_normalise_keys_treats_3_and_3_0_and_text_3_alike():
    assert list(normalise_keys(pd.Series([3, 4]))) == ["3", "4"]
    assert list(normalise_keys(pd.Series([3.0, 4.0]))) == ["3", "4"]
    assert list(normalise_keys(pd.Series([" 3", "4 "]))) == ["3", "4"]
    assert list(normalise_keys(pd.Series([0.5]))) == ["0.5"]


# --- submission checks ---------------------------------------------------------------------

ANSWERS = pd.DataFrame({"id": [10, 11, 12], "y": ["a", "b", "a"]})


def _reason(submission, columns=("y",)):
    with pytest.raises(InvalidSubmissionError) as info:
        align_submission(submission, ANSWERS, "id", list(columns))
    return str(info.value)


def test_align_sorts_both_by_id():
    sub, ans = align_submission(
        pd.DataFrame({"id": [12, 10, 11], "y": ["x", "y", "z"]}), ANSWERS, "id", ["y"]
    )
    assert list(sub["id"]) == ["10", "11", "12"] and list(sub["y"]) == ["y", "z", "x"]
    assert list(ans["y"]) == ["a", "b", "a"]


def test_missing_column_is_named():
    reason = _reason(pd.DataFrame({"id": [10, 11, 12], "label": ["a"] * 3}))
    assert "missing column(s) 'y'" in reason and "found id, label" in reason


def test_wrong_row_count():
    assert "has 2 rows but the test set has 3" in _reason(
        pd.DataFrame({"id": [10, 11], "y": ["a", "b"]})
    )


def test_repeated_ids():
    assert "repeats id(s) '10'" in _reason(pd.DataFrame({"id": [10, 10, 11], "y": ["a"] * 3}))


def test_wrong_ids_are_listed():
    reason = _reason(pd.DataFrame({"id": [10, 11, 99], "y": ["a"] * 3}))
    assert "1 unknown (e.g. '99')" in reason and "1 missing (e.g. '12')" in reason


def test_missing_values():
    assert "'y' has 1 missing value(s)" in _reason(
        pd.DataFrame({"id": [10, 11, 12], "y": ["a", None, "b"]})
    )


def test_not_a_table():
    assert "expected a table" in _reason([1, 2, 3])


def test_numeric_values_rejects_text_and_infinity():
    frame = pd.DataFrame({"id": [1, 2], "p": ["0.5", "high"]})
    with pytest.raises(InvalidSubmissionError, match="'p' must be numeric; got 'high' at id 2"):
        numeric_values(frame, ["p"])
    with pytest.raises(InvalidSubmissionError, match="infinite"):
        numeric_values(pd.DataFrame({"p": [1.0, np.inf]}), ["p"])
    assert numeric_values(pd.DataFrame({"p": ["0.25", 1]}), ["p"]).tolist() == [[0.25], [1.0]]


def test_probabilities_outside_unit_interval():
    with pytest.raises(
        InvalidSubmissionError,
        match=r"'q' must hold probabilities in \[0, 1\]; found 1.5 in row 2 of",
    ):
        check_probabilities(np.array([[0.1, 0.2], [0.3, 1.5]]), ["p", "q"])
    with pytest.raises(InvalidSubmissionError, match="row 1 .* all probabilities 0"):
        check_probabilities(np.array([[0.0, 0.0]]), ["p", "q"])
    check_probabilities(np.array([0.0, 1.0]), ["p"])  # a single column of edge values is fine


def test_probability_errors_name_the_line_of_the_file():
    # file order: ids 3, 1, 2 (lines 2, 3, 4); sorted by id, the bad id 1 is row 1
    sub = pd.DataFrame({"id": [3, 1, 2], "p": [0.5, 1.5, 0.2]})
    aligned, _ = align_submission(sub, pd.DataFrame({"id": [1, 2, 3], "p": [0, 1, 0]}), "id", ["p"])
    assert aligned.attrs["lines"] == [3, 4, 2]
    with pytest.raises(InvalidSubmissionError, match="found 1.5 in line 3 of the submission file"):
        check_probabilities(numeric_values(aligned, ["p"]), ["p"], lines=aligned.attrs["lines"])
