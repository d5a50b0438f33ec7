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


def read_text_file(path, what: str = "file") -> str:
    """The UTF-8 text of a file the user named; a missing, unreadable or non-UTF-8 file is a
    PracticumError naming it (`what` says what the file was for, e.g. "patch file")."""
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        raise PracticumError(f"{what} {path} does not exist")
    if not path.is_file():
        raise PracticumError(f"{what} {path} is not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PracticumError(
            f"{what} {path} is not UTF-8 text (byte {err.start}: "
            f"{err.object[err.start : err.start + 1]!r})"
        ) from None
    except OSError as err:
        raise PracticumError(f"cannot read {what} {path}: {err.strerror}") from None
