"""Errors caused by what a user gave practicum (config, model spec, task files, competitions).

The CLI catches `PracticumError` once and prints its message on one line; anything else is a
bug in practicum and keeps its traceback.
"""

from __future__ import annotations


class PracticumError(Exception):
    """A problem with the user's input that the message explains; no traceback is shown."""


class ConfigError(PracticumError, ValueError):
    """A bad config file, key or value; the message names the key (`config error at x.y: ...`)."""


class TrainingError(PracticumError):
    """A run that cannot make progress (e.g. every batch filtered out); the message says why."""
