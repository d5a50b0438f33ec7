"""The ML-engineering environment: MLE-bench-style competitions an agent solves by writing code.

Competitions: `competition_registry` finds them, `competition_folder` loads one,
`competition` prepares and grades it (`prepared_data`, `submission_checks`, `metrics`,
`medals`, `grading`; `mlebench_compat` for MLE-bench's folders); the CLI's `practicum mle ...`
handlers are in `commands`. The names below are imported lazily, so importing a sibling module
(actions, rewards, ...) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Competition": "competition",
    "CompetitionError": "competition_config",
    "PreparedPaths": "prepared_data",
    "list_competitions": "competition_registry",
    "load_competition": "competition_registry",
    "load_folder": "competition_folder",
    "InvalidSubmissionError": "submission_checks",
    "GradeReport": "grading",
    "grade_submission": "grading",
    "medal_thresholds": "medals",
    "add_mle_commands": "commands",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    return getattr(module, name)
