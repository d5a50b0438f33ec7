"""The ML-engineering environment: MLE-bench-style competitions an agent solves by writing code.

Competition loading, preparation and grading live in `competition`, `grading` and
`mlebench_compat`; the CLI's `practicum mle ...` handlers in `commands`. The names below are
imported lazily, so importing a sibling module (actions, rewards, ...) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Competition": "competition",
    "CompetitionError": "competition",
    "PreparedPaths": "competition",
    "list_competitions": "competition",
    "load_competition": "competition",
    "load_folder": "competition",
    "InvalidSubmissionError": "grading",
    "GradeReport": "grading",
    "grade_submission": "grading",
    "medal_thresholds": "grading",
    "add_mle_commands": "commands",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    return getattr(module, name)
