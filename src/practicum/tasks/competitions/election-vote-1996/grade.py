"""Accuracy of the predicted vote ("clinton" or "dole")."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import align_submission, normalise_keys


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["vote"])
    return accuracy(normalise_keys(ans["vote"]), normalise_keys(sub["vote"]))
