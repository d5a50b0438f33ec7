"""Multi-class log loss of the predicted cultivar probabilities (one column per class)."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import log_loss
from practicum.envs.mle.competitions.submission_checks import (
    align_submission,
    check_probabilities,
    numeric_values,
    one_hot,
)

CLASSES = ["class_0", "class_1", "class_2"]


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", CLASSES, answer_columns=["cultivar"])
    proba = numeric_values(sub, CLASSES)
    check_probabilities(proba, CLASSES, lines=sub.attrs["lines"])
    return log_loss(one_hot(ans["cultivar"], CLASSES), proba)
