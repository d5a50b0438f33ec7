"""Area under the ROC curve of the predicted probability that a mass is malignant."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import roc_auc
from practicum.envs.mle.competitions.submission_checks import (
    align_submission,
    check_probabilities,
    numeric_values,
)


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["malignant"])
    proba = numeric_values(sub, ["malignant"])
    check_probabilities(proba, ["malignant"], lines=sub.attrs["lines"])
    return roc_auc(ans["malignant"].to_numpy(), proba[:, 0])
