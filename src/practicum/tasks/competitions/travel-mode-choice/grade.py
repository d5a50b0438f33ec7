"""Accuracy of the predicted travel mode."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import align_submission, normalise_keys


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["mode"])
    return accuracy(normalise_keys(ans["mode"]), normalise_keys(sub["mode"]))
