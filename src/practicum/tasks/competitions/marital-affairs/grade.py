"""Binary log loss of the predicted probability of an affair."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import binary_log_loss
from practicum.envs.mle.competitions.submission_checks import aligned_probabilities


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    ans, proba = aligned_probabilities(submission, answers, ["affair"])
    return binary_log_loss(ans["affair"].to_numpy(dtype=float), proba[:, 0])
