"""Accuracy of the predicted species."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import align_submission, normalise_keys


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["species"])
    return accuracy(normalise_keys(ans["species"]), normalise_keys(sub["species"]))
