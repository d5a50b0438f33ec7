"""Root mean squared logarithmic error of the predicted number of visits (predictions >= 0)."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import rmsle
from practicum.envs.mle.competitions.submission_checks import (
    InvalidSubmissionError,
    align_submission,
    numeric_values,
)


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["visits"])
    predicted = numeric_values(sub, ["visits"])[:, 0]
    if (predicted < 0).any():
        raise InvalidSubmissionError("submission column 'visits' must be >= 0 (RMSLE takes logs)")
    return rmsle(ans["visits"].to_numpy(dtype=float), predicted)
