"""Root mean squared logarithmic error of the predicted number of visits (predictions >= 0)."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import rmsle
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError, aligned_values


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    truth, predicted = aligned_values(submission, answers, "visits")
    if (predicted < 0).any():
        raise InvalidSubmissionError("submission column 'visits' must be >= 0 (RMSLE takes logs)")
    return rmsle(truth, predicted)
