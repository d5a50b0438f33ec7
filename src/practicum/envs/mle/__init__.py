"""The ML-engineering environment: MLE-bench-style competitions an agent solves by writing code.

    competitions/   the competitions library: folders, prepared data, graders, medals
    credit/         partial credit: milestone instrumentation, rewards, the typed RunOutcome
    actions/        prompts, reply parsing, templates, self-improvement
    episode_data    a prepared competition as episodes share it
    env             MleEnv: one episode (reset -> Start, step -> StepResult)
    options         MleOptions: `task.options`, every key with its default
    suite           `mle_suite`, registered here as "mle" with MleOptions
    cli/            `practicum mle list | prepare | grade | run | evaluate`

Importing the package registers the environment and stays cheap; the names below are
imported lazily on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from practicum.envs.mle.audit import mle_audit
from practicum.envs.mle.options import MleOptions
from practicum.envs.mle.suite import mle_suite
from practicum.envs.registry import register_env

register_env("mle", MleOptions, mle_suite, audit=mle_audit)

_EXPORTS = {
    "Competition": "competitions.competition",
    "CompetitionError": "competitions.config",
    "PreparedPaths": "competitions.prepared_data",
    "list_competitions": "competitions.loading",
    "load_competition": "competitions.loading",
    "load_folder": "competitions.loading",
    "InvalidSubmissionError": "competitions.submission_checks",
    "GradeReport": "competitions.grading",
    "grade_submission": "competitions.grading",
    "medal_thresholds": "competitions.medals",
    "RunOutcome": "credit.outcome",
    "MleEnv": "env",
    "add_mle_commands": "cli.commands",
}

__all__ = sorted([*_EXPORTS, "MleOptions", "mle_suite"])


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    return getattr(module, name)
