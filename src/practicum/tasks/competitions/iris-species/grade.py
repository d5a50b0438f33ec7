"""Accuracy of the predicted species."""

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import label_grader

grade = label_grader(accuracy, "species")
