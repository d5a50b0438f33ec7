"""Root mean squared error of the predicted progression."""

from practicum.envs.mle.competitions.metrics import rmse
from practicum.envs.mle.competitions.submission_checks import value_grader

grade = value_grader(rmse, "progression")
