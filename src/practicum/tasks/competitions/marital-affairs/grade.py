"""Binary log loss of the predicted probability of an affair."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import binary_log_loss
from practicum.envs.mle.competitions.submission_checks import (
    align_submission,
    check_probabilities,
    numeric_values,
)


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["affair"])
    proba = numeric_values(sub, ["affair"])
    check_probabilities(proba, ["affair"], lines=sub.attrs["lines"])
    return binary_log_loss(ans["affair"].to_numpy(dtype=float), proba[:, 0])
