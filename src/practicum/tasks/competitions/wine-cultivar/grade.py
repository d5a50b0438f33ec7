"""Multi-class log loss of the predicted cultivar probabilities (one column per class)."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import log_loss
from practicum.envs.mle.competitions.submission_checks import aligned_probabilities, one_hot

CLASSES = ["class_0", "class_1", "class_2"]


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    ans, proba = aligned_probabilities(submission, answers, CLASSES, answer_columns=["cultivar"])
    return log_loss(one_hot(ans["cultivar"], CLASSES), proba)
