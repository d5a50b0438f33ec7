"""Accuracy of the predicted digit."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import align_submission, normalise_keys


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["digit"])
    return accuracy(normalise_keys(ans["digit"]), normalise_keys(sub["digit"]))
