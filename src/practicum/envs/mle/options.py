"""`task.options` of the `mle` suite: `MleOptions` documents every key and its default.

Its own module so that the environment (which reads the options) and the suite (which builds
the environment) both import it without importing each other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from practicum.errors import ConfigError

DEFAULT_HELD_OUT = ("iris-species", "breast-cancer-diagnosis", "diabetes-progression")
"""Held out by default: a multi-class, a binary (AUC) and a regression competition."""


class MleOptions(BaseModel):
    """`task.options` of the mle suite."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["template", "section", "script"] = Field(
        "template",
        description="template: fill one marked line of a fixed script (small "
        "models); section: write the modelling section (features, fit, predictions; up to 25 "
        "lines) of a fixed script that loads the data and writes the submission; script: a "
        "plan and a whole Python script.",
    )
    instrumenter: str = Field(
        "base",
        description="Who inserts milestone prints, as a model-service spec: base (the "
        "policy's frozen base: the live policy with its adapter off), local:<model>, "
        "openai:<base_url>|<model>, or rules (the AST inserter, no model).",
    )
    instrumenter_max_new_tokens: int = Field(
        2048,
        gt=0,
        description="Cap on the LLM instrumenter's rewrite in tokens (it also "
        "stops at about half the script's characters + 400).",
    )
    instrumenter_protocol: Literal["rewrite", "lines"] = Field(
        "rewrite",
        description="How the LLM instrumenter answers: rewrite (the whole script "
        "with the marker prints, as in the paper) or lines (`milestone: line number` pairs; "
        "the prints are inserted by code: a few tokens instead of the script).",
    )
    instrumenter_max_chars: int | None = Field(
        None,
        gt=0,
        description="Scripts longer than this many characters are not sent to the "
        "LLM instrumenter (the rules mark them); None: every script is.",
    )
    held_out: list[str] = Field(list(DEFAULT_HELD_OUT), description="Held-out competition ids.")
    train: list[str] | None = Field(
        None, description="Training competition ids; None = every other known competition."
    )
    exclude: list[str] = Field(
        default_factory=list, description="Competitions never used for training."
    )
    train_repeats: int = Field(
        1,
        ge=1,
        description="Copies of each training competition per "
        "pass of the task cursor (weights the mix when uneven).",
    )
    eval_repeats: int = Field(
        1,
        ge=1,
        description="Episodes per held-out competition in one "
        "evaluation (use > 1 with sampling, eval.temperature > 0).",
    )
    competitions_dirs: list[str] = Field(
        default_factory=list,
        description="Extra folders of competitions, searched before the bundled suite.",
    )
    data_root: str | None = Field(
        None,
        description="Prepared data root (default $PRACTICUM_DATA/mle or ~/.cache/practicum/mle).",
    )
    wall_seconds: float = Field(60.0, gt=0, description="Wall-clock limit of one run.")
    memory_mb: int = Field(2048, gt=0, description="Memory limit of one run.")
    max_processes: int = Field(64, gt=0, description="Processes + threads of one run.")
    backend: Literal["auto", "bwrap", "namespaces"] = Field(
        "auto", description="Sandbox backend (auto: bwrap if it works here, else namespaces)."
    )
    attempts: int = Field(1, ge=1, description="Actions per episode (multi-turn when > 1).")
    improve_prob: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Probability of a self-improvement prompt when the task has a stored solution.",
    )
    buffer_size: int = Field(4, ge=1, description="Solutions kept per competition.")
    reuse_runs: bool = Field(
        True,
        description="A reply whose program (the whole script) already ran on this competition "
        "gets that run's outcome instead of a new sandboxed run (`run_cache`): copies in a "
        "GRPO group are common. Only runs that ended on their own are reused, and only with the "
        "rules instrumenter; code drawing unseeded random numbers shares its first draw.",
    )
    failure_reward: float = Field(
        -10.0,
        description="Reward of a run without valid submission "
        "(before milestone credit); an unparsable reply earns it too. "
        "A sandbox failure earns rollout.failure_reward instead.",
    )
    milestone_credit: float = Field(0.1, ge=0, description="Credit per distinct milestone.")
    partial_credit: bool = Field(True, description="Milestone credit on (False: ablation).")
    lower_is_better_transform: Literal["negate", "exp", "inverse"] = Field(
        "inverse",
        description="Orientation of lower-is-better scores. The paper negates (one "
        "task per run); across tasks an RMSE of 60 would then fall below the failure reward, "
        "so the default maps v to 1 / (1 + v / beta).",
    )
    beta: float = Field(3.0, gt=0, description="Scale of the exp/inverse transforms.")
    score_scale: Literal["leaderboard", "raw"] = Field(
        "leaderboard",
        description="leaderboard: the score credit is normalised per "
        "competition, 0 = its sample submission (a constant guess), 1 = its best baseline on "
        "leaderboard.csv, clipped to [-1, 2] (raw scores where a competition has no "
        "leaderboard); raw: the oriented metric (lower_is_better_transform).",
    )
    salvage: bool = Field(
        True,
        description="Template mode: accept a lone `model = ...` line "
        "found inside an otherwise malformed reply. Section mode: run the "
        "longest parsing prefix of a code block cut off by the token budget.",
    )
    line_stop: bool = Field(
        True,
        description="Template mode: the reply's turn ends at its first "
        "line break (the reply format is one line), instead of sampling on "
        "to the token budget.",
    )
    output_chars: int = Field(600, gt=0, description="Run output shown to the agent.")
    workdir_root: str | None = Field(None, description="Where work folders are created.")


def check_instrumenter(spec: str, key: str = "task.options.instrumenter") -> None:
    """ConfigError (naming `key`) unless `spec` names a frozen model or the rules: "policy" is
    the model being trained, never a fair judge of its own milestones."""
    from practicum.engine.service import check_spec

    check_spec(spec, key, resolve_local=True)
    if spec.strip() == "policy":
        raise ConfigError(
            f"config error at {key}: the instrumenter must be frozen: use base "
            f"(the policy's base weights), local:<model>, openai:<base_url>|<model> "
            f"or rules, not policy"
        )
