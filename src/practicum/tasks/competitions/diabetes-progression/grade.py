"""Root mean squared error of the predicted progression."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import rmse
from practicum.envs.mle.competitions.submission_checks import aligned_values


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    return rmse(*aligned_values(submission, answers, "progression"))
