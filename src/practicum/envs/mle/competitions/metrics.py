"""Competition metrics, each small and pure: arrays in, a float out (`accuracy`, `rmse`, ...).

y_true / y_pred are 1-D arrays unless said otherwise. `LOWER_IS_BETTER` /
`metric_lower_is_better` give each metric's direction by name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
    """Binary log loss: -(1/N) sum_i [y_i log p_i + (1 - y_i) log(1 - p_i)],
    p clipped to [eps, 1-eps]."""
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
