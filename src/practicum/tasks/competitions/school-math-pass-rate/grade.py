"""Mean absolute error of the predicted pass rate."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import mae
from practicum.envs.mle.competitions.submission_checks import aligned_values


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    return mae(*aligned_values(submission, answers, "pass_rate"))
