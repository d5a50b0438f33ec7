"""Scoring submissions: metrics, submission checks and medal thresholds.

Three kinds of pieces, each small and pure:
- metrics (`accuracy`, `rmse`, `log_loss`, ...): arrays in, a float out;
- submission checks (`align_submission`, `numeric_values`, `check_probabilities`): a
  competition's grade.py calls them first so a bad submission fails with a readable reason
  (`InvalidSubmissionError`) instead of a numpy traceback;
- medals (`medal_positions`, `medal_thresholds`, `medal_for`): MLE-bench's rule
  (openai/mle-bench, grade_helpers.py; itself Kaggle's progression system).

`GradeReport` / `grade_submission` tie them to a loaded `Competition`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from practicum.envs.mle.competition import Competition


class InvalidSubmissionError(Exception):
    """The submission cannot be graded; the message says why, in words a person can act on."""


# ---------------------------------------------------------------------------------------------
# Metrics. y_true / y_pred are 1-D arrays unless said otherwise.

LOWER_IS_BETTER: dict[str, bool] = {
    "accuracy": False,
    "macro-f1": False,
    "auc-roc": False,
    "rmse": True,
    "mae": True,
    "rmsle": True,
    "log-loss": True,
}
"""Direction of every metric this module implements, keyed by the name used in config.yaml."""

_METRIC_ALIASES = {
    "auc": "auc-roc",
    "roc-auc": "auc-roc",
    "auroc": "auc-roc",
    "f1-macro": "macro-f1",
    "logloss": "log-loss",
    "multi-class-log-loss": "log-loss",
    "binary-log-loss": "log-loss",
    "root-mean-squared-error": "rmse",
    "mean-absolute-error": "mae",
}


def metric_lower_is_better(name: str) -> bool | None:
    """Direction of a metric by name (case and `_`/`-` insensitive); None when unknown."""
    key = name.strip().lower().replace("_", "-")
    return LOWER_IS_BETTER.get(_METRIC_ALIASES.get(key, key))


def accuracy(y_true: Sequence, y_pred: Sequence) -> float:
    """Fraction of exact matches: (1/N) sum_i [y_i == yhat_i]."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return float(np.mean(y_true == y_pred))


def macro_f1(y_true: Sequence, y_pred: Sequence) -> float:
    """Unweighted mean over classes of F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c).

    Classes are those seen in y_true or y_pred (scikit-learn's `f1_score(average="macro")`);
    a class with TP = FP = FN = 0 cannot occur under that rule.
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    scores = []
    for c in np.union1d(y_true, y_pred):
        tp = np.sum((y_true == c) & (y_pred == c))
        fp = np.sum((y_true != c) & (y_pred == c))
        fn = np.sum((y_true == c) & (y_pred != c))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def rmse(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Root mean squared error: sqrt((1/N) sum_i (y_i - yhat_i)^2)."""
    diff = np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float)
    return float(np.sqrt(np.mean(diff**2)))


def mae(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Mean absolute error: (1/N) sum_i |y_i - yhat_i|."""
    diff = np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float)
    return float(np.mean(np.abs(diff)))


def rmsle(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Root mean squared logarithmic error: sqrt((1/N) sum_i (log(1+yhat_i) - log(1+y_i))^2).

    Defined for y, yhat >= 0 (Kaggle's usual count/price metric); raises ValueError otherwise.
    """
    y_true, y_pred = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    if (y_true < 0).any() or (y_pred < 0).any():
        raise ValueError("rmsle is undefined for negative values")
    return float(np.sqrt(np.mean((np.log1p(y_pred) - np.log1p(y_true)) ** 2)))


def log_loss(y_true: np.ndarray, proba: np.ndarray, eps: float = 1e-15) -> float:
    """Multi-class logarithmic loss: -(1/N) sum_i sum_c y_ic log p_ic.

    y_true: [N, C] one-hot. proba: [N, C] non-negative; each row is divided by its sum (as
    Kaggle does), then clipped to [eps, 1 - eps] so a confident mistake costs -log(eps) ~ 34.5.
    """
    y_true, proba = np.asarray(y_true, dtype=float), np.asarray(proba, dtype=float)
    proba = proba / proba.sum(axis=1, keepdims=True)
    proba = np.clip(proba, eps, 1 - eps)
    return float(-np.mean(np.sum(y_true * np.log(proba), axis=1)))


def binary_log_loss(y_true: Sequence[float], p: Sequence[float], eps: float = 1e-15) -> float:
    """Binary log loss: -(1/N) sum_i [y_i log p_i + (1 - y_i) log(1 - p_i)], p clipped to [eps, 1-eps]."""
    y, p = np.asarray(y_true, dtype=float), np.clip(np.asarray(p, dtype=float), eps, 1 - eps)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of `values`; a group of ties gets the mean of the ranks it spans."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ordered)) + 1]
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def roc_auc(y_true: Sequence[int], score: Sequence[float]) -> float:
    """Area under the ROC curve via the Mann-Whitney U statistic (Hanley & McNeil, 1982).

    AUC = (R_pos - n_pos (n_pos + 1) / 2) / (n_pos n_neg), R_pos the sum of the positives'
    ranks among all scores (ties get their average rank, so a tie counts one half).
    """
    y, s = np.asarray(y_true).astype(int), np.asarray(score, dtype=float)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("roc_auc needs at least one positive and one negative example")
    ranks = average_ranks(s)
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# ---------------------------------------------------------------------------------------------
# Submission checks. Each raises InvalidSubmissionError naming the column, row or id at fault.


def normalise_keys(values: pd.Series) -> pd.Series:
    """Ids or labels as comparable strings: 3, 3.0 and "3" all become "3"; text is stripped."""
    if pd.api.types.is_bool_dtype(values):
        return values.astype(str)
    if pd.api.types.is_integer_dtype(values):  # exact, even beyond float precision
        return values.map(lambda v: "" if pd.isna(v) else str(int(v)))
    if pd.api.types.is_numeric_dtype(values):
        numbers = values.astype(float)
        finite = numbers.dropna()
        if len(finite) and np.all(np.isfinite(finite)) and np.all(finite == np.round(finite)):
            return numbers.map(lambda v: "" if pd.isna(v) else str(int(v)))
        return numbers.map(lambda v: "" if pd.isna(v) else repr(float(v)))
    return values.map(lambda v: "" if pd.isna(v) else str(v).strip())


def _examples(items: Sequence[Any], limit: int = 3) -> str:
    shown = ", ".join(repr(x) for x in list(items)[:limit])
    return shown + (", ..." if len(items) > limit else "")


def align_submission(
    submission: pd.DataFrame,
    answers: pd.DataFrame,
    id_column: str,
    columns: Sequence[str],
    answer_columns: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Check a submission's shape and ids against the answers; return both sorted by id.

    Checks, in order: the id column and every column in `columns` exist; the row count equals
    the answers'; ids are unique, not missing, and exactly the answers' ids; `columns` hold no
    missing values. Returns (submission[[id, *columns]], answers[[id, *answer_columns]]) in the
    same row order, index 0..N-1. `answer_columns` defaults to `columns`.
    """
    if not isinstance(submission, pd.DataFrame):
        raise InvalidSubmissionError(f"expected a table, got {type(submission).__name__}")
    answer_columns = list(columns if answer_columns is None else answer_columns)
    wanted = [id_column, *columns]
    missing = [c for c in wanted if c not in submission.columns]
    if missing:
        raise InvalidSubmissionError(
            f"submission is missing column(s) {_examples(missing, 10)}; expected columns "
            f"{', '.join(wanted)}; found {', '.join(map(str, submission.columns)) or 'none'}"
        )
    if len(submission) != len(answers):
        raise InvalidSubmissionError(
            f"submission has {len(submission)} row{'s' * (len(submission) != 1)} but the "
            f"test set has {len(answers)} "
            f"(one row per id in test.csv)"
        )
    sub_ids, ans_ids = normalise_keys(submission[id_column]), normalise_keys(answers[id_column])
    if (sub_ids == "").any():
        raise InvalidSubmissionError(f"submission column '{id_column}' has missing ids")
    repeated = sub_ids[sub_ids.duplicated()].unique()
    if len(repeated):
        raise InvalidSubmissionError(f"submission repeats {id_column}(s) {_examples(repeated)}")
    unknown = sorted(set(sub_ids) - set(ans_ids))
    if unknown:
        absent = sorted(set(ans_ids) - set(sub_ids))
        raise InvalidSubmissionError(
            f"submission {id_column}s do not match the test set: {len(unknown)} unknown "
            f"(e.g. {_examples(unknown)}), {len(absent)} missing (e.g. {_examples(absent)})"
        )
    sub = submission[wanted].assign(**{id_column: sub_ids}).sort_values(id_column, kind="stable")
    ans = answers[[id_column, *answer_columns]].assign(**{id_column: ans_ids})
    ans = ans.sort_values(id_column, kind="stable")
    sub, ans = sub.reset_index(drop=True), ans.reset_index(drop=True)
    for column in columns:
        empty = sub[column].isna()
        if empty.any():
            raise InvalidSubmissionError(
                f"submission column '{column}' has {int(empty.sum())} missing value(s) "
                f"(e.g. at {id_column} {_examples(list(sub.loc[empty, id_column]))})"
            )
    return sub, ans


def numeric_values(
    frame: pd.DataFrame, columns: Sequence[str], id_column: str = "id"
) -> np.ndarray:
    """The named columns as a float array [N, len(columns)]; rejects text and infinities."""
    out = []
    for column in columns:
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() & frame[column].notna()
        if bad.any():
            first = bad.to_numpy().nonzero()[0][0]
            raise InvalidSubmissionError(
                f"submission column '{column}' must be numeric; got {frame[column].iloc[first]!r}"
                + (f" at {id_column} {frame[id_column].iloc[first]}" if id_column in frame else "")
            )
        array = values.to_numpy(dtype=float)
        if not np.all(np.isfinite(array)):
            raise InvalidSubmissionError(f"submission column '{column}' has infinite values")
        out.append(array)
    return np.stack(out, axis=1)


def check_probabilities(values: np.ndarray, columns: Sequence[str]) -> None:
    """Every value in [0, 1]; for several columns, every row's sum positive (it is renormalised)."""
    values = np.atleast_2d(np.asarray(values, dtype=float).T).T
    outside = (values < 0) | (values > 1)
    if outside.any():
        row, col = np.argwhere(outside)[0]
        raise InvalidSubmissionError(
            f"submission column '{columns[col]}' must hold probabilities in [0, 1]; "
            f"found {values[row, col]:g} in row {row + 1}"
        )
    if values.shape[1] > 1 and (values.sum(axis=1) <= 0).any():
        row = int(np.argmax(values.sum(axis=1) <= 0))
        raise InvalidSubmissionError(f"row {row + 1} of the submission has all probabilities 0")


def one_hot(labels: Sequence, classes: Sequence[str]) -> np.ndarray:
    """[N, C] indicator matrix of normalised labels over `classes`; unknown labels raise ValueError."""
    keys = normalise_keys(pd.Series(list(labels)))
    index = {str(c): i for i, c in enumerate(classes)}
    unknown = sorted(set(keys) - set(index))
    if unknown:
        raise ValueError(f"labels {unknown[:3]} are not among the classes {list(classes)}")
    out = np.zeros((len(keys), len(classes)))
    out[np.arange(len(keys)), [index[k] for k in keys]] = 1.0
    return out


# ---------------------------------------------------------------------------------------------
# Reading a submission file.


def read_submission(submission: Path | str | pd.DataFrame) -> pd.DataFrame:
    """A submission as a DataFrame; a missing, empty or unparsable file is an invalid submission."""
    if isinstance(submission, pd.DataFrame):
        return submission
    path = Path(submission)
    if not path.is_file():
        raise InvalidSubmissionError(f"no submission file at {path}")
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InvalidSubmissionError(f"submission file {path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise InvalidSubmissionError(f"cannot parse {path} as CSV: {err}") from None


# ---------------------------------------------------------------------------------------------
# Medals (MLE-bench, mlebench/grade_helpers.py `Grader.rank_score`; Kaggle progression rules).


def medal_positions(n_teams: int) -> tuple[int, int, int]:
    """Leaderboard positions (1-based) whose scores are the gold, silver, bronze thresholds.

    N < 100: gold max(1, floor(0.1 N)), silver max(1, floor(0.2 N)), bronze max(1, floor(0.4 N));
    100 <= N < 250: 10, floor(0.2 N), floor(0.4 N);  250 <= N < 1000: 10 + floor(0.002 N), 50, 100;
    N >= 1000: 10 + floor(0.002 N), floor(0.05 N), floor(0.1 N).
    (The max(1, .) guards, as in MLE-bench's code, keep tiny leaderboards defined.)
    """
    n = int(n_teams)
    if n < 1:
        raise ValueError(f"a leaderboard needs at least one team, got {n}")
    if n < 100:
        return max(1, n // 10), max(1, n // 5), max(1, 2 * n // 5)
    if n < 250:
        return 10, n // 5, 2 * n // 5
    if n < 1000:
        return 10 + n // 500, 50, 100
    return 10 + n // 500, n // 20, n // 10


def medal_thresholds(leaderboard_scores: Sequence[float]) -> dict:
    """Medal thresholds from a best-first list of leaderboard scores.

    Returns {"n_teams", "gold", "silver", "bronze", "median", "positions": {...},
    "lower_is_better"}; thresholds are the scores at `medal_positions(N)`; the median is of
    all scores; direction is inferred as MLE-bench does: best (first) score < last score.
    """
    scores = [float(s) for s in leaderboard_scores]
    gold, silver, bronze = medal_positions(len(scores))
    return {
        "n_teams": len(scores),
        "gold": scores[gold - 1],
        "silver": scores[silver - 1],
        "bronze": scores[bronze - 1],
        "median": float(np.median(scores)),
        "positions": {"gold": gold, "silver": silver, "bronze": bronze},
        "lower_is_better": scores[0] < scores[-1],
    }


def medal_for(score: float, thresholds: dict, lower_is_better: bool) -> str | None:
    """ "gold", "silver", "bronze" or None: the best medal whose threshold the score reaches (ties count)."""
    for medal in ("gold", "silver", "bronze"):
        limit = thresholds[medal]
        if (score <= limit) if lower_is_better else (score >= limit):
            return medal
    return None


def above_median(score: float, thresholds: dict, lower_is_better: bool) -> bool:
    """Strictly better than the leaderboard median (MLE-bench's `above_median`)."""
    return score < thresholds["median"] if lower_is_better else score > thresholds["median"]


# ---------------------------------------------------------------------------------------------


@dataclass
class GradeReport:
    """The outcome of grading one submission file for one competition."""

    competition_id: str
    submission: str
    """Path of the graded CSV."""
    valid: bool
    """False when the file is missing, unreadable or rejected by the grader."""
    score: float | None
    """The metric in its own units (see lower_is_better); None when invalid."""
    reason: str | None
    """Why the submission is invalid; None when valid."""
    lower_is_better: bool
    medal: str | None = None
    """"gold", "silver", "bronze" or None; None too when the competition has no leaderboard."""
    above_median: bool | None = None
    """Strictly better than the leaderboard median; None without a leaderboard or score."""
    thresholds: dict | None = None
    """`medal_thresholds(...)` of the competition's leaderboard, if it has one."""

    def to_dict(self) -> dict:
        return asdict(self)


def grade_submission(
    comp: Competition, submission_csv: str | Path, data_root: Path | None = None
) -> GradeReport:
    """Grade a CSV file; never raises for a bad submission (the report says why it is invalid).

    The answers come from `comp.prepare(data_root)` (prepared on first use). Errors in the
    competition itself (broken grade.py, data that cannot be prepared) raise
    `CompetitionError`: those are not the submission's fault.
    """
    path = Path(submission_csv)
    thresholds = comp.medal_thresholds()
    report = GradeReport(
        comp.id, str(path), False, None, None, comp.lower_is_better, thresholds=thresholds
    )
    answers = comp.prepare(data_root).answers
    try:
        score = comp.grade(path, answers)
    except InvalidSubmissionError as err:
        report.reason = str(err)
        return report
    report.valid, report.score = True, score
    if thresholds is not None and not math.isnan(score):
        report.medal = medal_for(score, thresholds, comp.lower_is_better)
        report.above_median = above_median(score, thresholds, comp.lower_is_better)
    return report
