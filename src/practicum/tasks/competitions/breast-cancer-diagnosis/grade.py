"""Area under the ROC curve of the predicted probability that a mass is malignant."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import roc_auc
from practicum.envs.mle.competitions.submission_checks import aligned_probabilities


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    ans, proba = aligned_probabilities(submission, answers, ["malignant"])
    return roc_auc(ans["malignant"].to_numpy(), proba[:, 0])
