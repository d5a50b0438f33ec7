"""Macro-averaged F1 of the predicted chapter (every chapter counts equally)."""

from practicum.envs.mle.competitions.metrics import macro_f1
from practicum.envs.mle.competitions.submission_checks import label_grader

grade = label_grader(macro_f1, "chapter")
