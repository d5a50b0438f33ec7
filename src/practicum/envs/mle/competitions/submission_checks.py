"""Checking a submission before a metric sees it: read, align to the answers, validate values.

A competition's grade.py is a `label_grader` or `value_grader`, or calls `aligned_labels`,
`aligned_values` or `aligned_probabilities` (built from `align_submission`, `numeric_values`,
`check_probabilities`) first, so a bad submission fails with a readable reason
(`InvalidSubmissionError`, naming the column, row or id at fault) instead of a numpy traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from practicum.errors import PracticumError


class InvalidSubmissionError(PracticumError):
    """The submission cannot be graded; the message says why, in words a person can act on.

    Raised by graders (grade.py files, `Competition.grade`), which callers turn into an
    invalid grade; a PracticumError so that one reaching the command line prints as one line.
    """


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
    same row order, index 0..N-1. `answer_columns` defaults to `columns`. The submission's
    `attrs["lines"]` holds each returned row's line in the CSV file (line 1 the header), for
    messages that must point into the file (`check_probabilities(..., lines=...)`).
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
    sub = submission[wanted].assign(**{id_column: sub_ids}, _line=range(2, len(submission) + 2))
    sub = sub.sort_values(id_column, kind="stable")
    ans = answers[[id_column, *answer_columns]].assign(**{id_column: ans_ids})
    ans = ans.sort_values(id_column, kind="stable")
    sub, ans = sub.reset_index(drop=True), ans.reset_index(drop=True)
    lines = sub.pop("_line").tolist()
    sub.attrs["lines"] = lines
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


def check_probabilities(
    values: np.ndarray, columns: Sequence[str], lines: Sequence[int] | None = None
) -> None:
    """Every value in [0, 1]; for several columns, every row's sum positive (it is renormalised).

    lines: each row's line in the submission file (`align_submission`'s `attrs["lines"]`), so
    the message names the line a person can find; without it, the row of `values`."""

    def where(row: int) -> str:
        return (
            f"line {lines[row]} of the submission file"
            if lines is not None
            else f"row {row + 1} of the submission"
        )

    values = np.atleast_2d(np.asarray(values, dtype=float).T).T
    outside = (values < 0) | (values > 1)
    if outside.any():
        row, col = np.argwhere(outside)[0]
        raise InvalidSubmissionError(
            f"submission column '{columns[col]}' must hold probabilities in [0, 1]; "
            f"found {values[row, col]:g} in {where(row)}"
        )
    if values.shape[1] > 1 and (values.sum(axis=1) <= 0).any():
        row = int(np.argmax(values.sum(axis=1) <= 0))
        raise InvalidSubmissionError(f"{where(row)} has all probabilities 0")


def one_hot(labels: Sequence, classes: Sequence[str]) -> np.ndarray:
    """[N, C] indicator matrix of normalised labels over `classes`; unknown labels raise
    ValueError."""
    keys = normalise_keys(pd.Series(list(labels)))
    index = {str(c): i for i, c in enumerate(classes)}
    unknown = sorted(set(keys) - set(index))
    if unknown:
        raise ValueError(f"labels {unknown[:3]} are not among the classes {list(classes)}")
    out = np.zeros((len(keys), len(classes)))
    out[np.arange(len(keys)), [index[k] for k in keys]] = 1.0
    return out


def aligned_labels(
    submission: pd.DataFrame, answers: pd.DataFrame, column: str
) -> tuple[pd.Series, pd.Series]:
    """(true, predicted) labels of column `column`, aligned by id and normalised for comparison."""
    sub, ans = align_submission(submission, answers, "id", [column])
    return normalise_keys(ans[column]), normalise_keys(sub[column])


def aligned_values(
    submission: pd.DataFrame, answers: pd.DataFrame, column: str
) -> tuple[np.ndarray, np.ndarray]:
    """(true, predicted) numbers of column `column`, aligned by id; text or infinities rejected."""
    sub, ans = align_submission(submission, answers, "id", [column])
    return ans[column].to_numpy(dtype=float), numeric_values(sub, [column])[:, 0]


Grader = Callable[[pd.DataFrame, pd.DataFrame], float]


def label_grader(metric: Callable[[pd.Series, pd.Series], float], column: str) -> Grader:
    """grade(submission, answers) = metric(true, predicted) over the labels of `column`."""
    return lambda submission, answers: metric(*aligned_labels(submission, answers, column))


def value_grader(metric: Callable[[np.ndarray, np.ndarray], float], column: str) -> Grader:
    """grade(submission, answers) = metric(true, predicted) over the numbers of `column`."""
    return lambda submission, answers: metric(*aligned_values(submission, answers, column))


def aligned_probabilities(
    submission: pd.DataFrame,
    answers: pd.DataFrame,
    columns: Sequence[str],
    answer_columns: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """(answers aligned by id, predicted probabilities [N, len(columns)]), each in [0, 1]."""
    sub, ans = align_submission(submission, answers, "id", columns, answer_columns)
    proba = numeric_values(sub, columns)
    check_probabilities(proba, columns, lines=sub.attrs["lines"])
    return ans, proba


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
