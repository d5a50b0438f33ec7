"""Accuracy of the predicted vote ("clinton" or "dole")."""

from practicum.envs.mle.competitions.metrics import accuracy
from practicum.envs.mle.competitions.submission_checks import label_grader

grade = label_grader(accuracy, "vote")
