"""Macro-averaged F1 of the predicted chapter (every chapter counts equally)."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import macro_f1
from practicum.envs.mle.competitions.submission_checks import aligned_labels


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    return macro_f1(*aligned_labels(submission, answers, "chapter"))
