"""Reading a competition's config.yaml: YAML with located errors, dotted keys, the `practicum:`
section's schema; and `CompetitionError`, raised whenever a folder or its data is unusable."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field

from practicum.errors import PracticumError


class CompetitionError(PracticumError):
    """A competition folder or its data is unusable (not the submission's fault)."""


class PracticumSection(BaseModel, extra="forbid"):
    """The optional `practicum:` section of config.yaml (our additions to MLE-bench's keys)."""

    direction: Literal["lower", "higher"] | None = Field(
        None, description="Whether lower or higher scores are better; else inferred."
    )
    metric: str | None = Field(None, description="Metric name; defaults to grader.name.")
    task: str | None = Field(
        None, description="binary, multiclass, regression or text-classification (informative)."
    )
    id_column: str = Field("id", description="Column naming each test row.")
    target_columns: list[str] = Field(
        default_factory=list, description="Columns of private/answers.csv holding the truth."
    )
    submission_columns: list[str] = Field(
        default_factory=list, description="Columns a submission must have, id first."
    )
    raw_source: str | None = Field(
        None, description="Where the data comes from when not from raw files (e.g. a package)."
    )
    needs_raw: bool | None = Field(
        None, description="Whether prepare() needs a raw dir; default: raw_source is unset."
    )
    rows: int | None = Field(None, description="Rows in train + test (informative).")
    seed: int | None = Field(None, description="random_state of the train/test split.")
    secret_transform: bool = Field(
        False,
        description="Re-encode the prepared split with the machine's secret (numeric "
        "features: positive affine maps; multi-class labels: a derangement) so its answers "
        "cannot be looked up in the public source data (see secret_transform).",
    )


def read_yaml(path: Path, cid: str) -> Any:
    """A YAML file of competition `cid` as parsed; CompetitionError names the line if invalid."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise CompetitionError(
            f"competition '{cid}': {path.name} is not valid YAML{at}: {problem} ({path})"
        ) from None


def config_value(config: dict, dotted: str) -> Any:
    """`config["a"]["b"]` for "a.b"; None when any part is missing."""
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
