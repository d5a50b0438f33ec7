"""Root mean squared error of the predicted progression."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import rmse
from practicum.envs.mle.competitions.submission_checks import align_submission, numeric_values


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["progression"])
    return rmse(ans["progression"].to_numpy(dtype=float), numeric_values(sub, ["progression"])[:, 0])
