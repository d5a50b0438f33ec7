"""Macro-averaged F1 of the predicted chapter (every chapter counts equally)."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import macro_f1
from practicum.envs.mle.competitions.submission_checks import align_submission, normalise_keys


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["chapter"])
    return macro_f1(normalise_keys(ans["chapter"]), normalise_keys(sub["chapter"]))
