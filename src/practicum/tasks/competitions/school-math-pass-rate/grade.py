"""Mean absolute error of the predicted pass rate."""

import pandas as pd

from practicum.envs.mle.competitions.metrics import mae
from practicum.envs.mle.competitions.submission_checks import align_submission, numeric_values


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    sub, ans = align_submission(submission, answers, "id", ["pass_rate"])
    return mae(ans["pass_rate"].to_numpy(dtype=float), numeric_values(sub, ["pass_rate"])[:, 0])
