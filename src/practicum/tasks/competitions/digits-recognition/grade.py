"""Accuracy of the predicted digit."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import aligned_labels


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    return accuracy(*aligned_labels(submission, answers, "digit"))
