"""Mean absolute error of the predicted pass rate."""

from practicum.envs.mle.competitions.metrics import mae
from practicum.envs.mle.competitions.submission_checks import value_grader

grade = value_grader(mae, "pass_rate")
