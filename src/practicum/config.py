"""Typed run configuration: YAML file + dotted command-line overrides, validated by pydantic.

Every field has a description; `extra="forbid"` turns a typo into an error naming the key.
Errors surface as `ConfigError("config error at train.lr: ...")`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from practicum.engine.kinds import find_engine, unknown_engine
from practicum.engine.options import EngineOptions, HFOptions, ModelOptions
from practicum.errors import ConfigError
from practicum.placement_plan import (
    LocalPlacement,
    PlacementPlan,
    check_plan,
    migrate,
    refuse_old_keys,
)

log = logging.getLogger(__name__)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunConfig(Section):
    name: str = Field("default", description="Run name; the run folder is out_dir/name.")
    out_dir: str = Field("runs", description="Folder holding run folders.")
    seed: int = Field(0, description="Seed for task sampling, generation and initialisation.")
    resume: bool = Field(True, description="Resume from the run folder's last checkpoint if any.")


class TaskConfig(Section):
    name: str = Field(
        "calculator",
        description="Registered environment to train on "
        "(calculator, mle, timed_bandit, toy, or one a package registers).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The environment's own typed options (validated by "
        "its options model; the run folder's config.yaml shows them resolved).",
    )


class SamplingConfig(Section):
    temperature: float = Field(1.0, ge=0, description="Sampling temperature for training rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(48, gt=0, description="Token budget of one policy turn.")


class AgentConfig(Section):
    """An outside agent program trained through an episode-scoped endpoint (`practicum.agent`)."""

    command: list[str] = Field(
        min_length=1,
        description="The agent's command, started once per episode in the "
        "environment's sandbox (cwd: the task's work folder). Placeholders: {python} (this "
        "interpreter), {task} (the task text), {task_file} (a read-only file holding it), "
        "{model} (the policy's model id), {base_url} (the endpoint, also OPENAI_BASE_URL). "
        "Paths in it that exist here (its script, its venv's python: the whole venv) are "
        "shown read-only inside.",
    )
    task_input: Literal["file", "argv", "stdin"] = Field(
        "file",
        description="How the task reaches the agent: file (PRACTICUM_TASK_FILE names "
        "a read-only file; also {task_file}), argv (appended as the last argument unless "
        "{task} appears), stdin.",
    )
    mounts: list[str] = Field([], description="More host paths shown read-only inside.")
    env: dict[str, str] = Field(
        {},
        description="More environment variables of the agent "
        "(besides OPENAI_BASE_URL, OPENAI_API_KEY, PRACTICUM_MODEL).",
    )
    sampling: Literal["agent", "run"] = Field(
        "agent",
        description="agent: each call's temperature and top_p are honoured, and "
        "calls the learner cannot score (another temperature than sampling.temperature, "
        "top_p < 1) are recorded but not trained; run: every policy call samples at the run's "
        "temperature (evaluation: eval.temperature), the agent's asked values recorded.",
    )
    time_limit_s: float = Field(
        300.0,
        gt=0,
        description="Wall-clock limit of one episode "
        "(an environment's own limit, when it has one, wins).",
    )
    memory_mb: int = Field(4096, gt=0, description="Memory limit of each agent process.")
    max_processes: int = Field(256, gt=0, description="Processes plus threads of the agent.")
    max_calls: int = Field(200, ge=1, description="Calls per episode; more fail the episode.")
    max_parallel_calls: int = Field(4, ge=1, description="Calls in flight at once per episode.")
    max_call_tokens: int = Field(
        1024,
        ge=1,
        description="Reply budget of one call (an "
        "agent's max_tokens is honoured up to it and the row's room).",
    )
    max_episode_tokens: int = Field(
        100_000, ge=1, description="Sampled tokens per episode; a call past it fails the episode."
    )
    min_reply_tokens: int = Field(
        32,
        ge=1,
        description="Room a call's prompt must leave in "
        "its row (rollout.max_seq_len); longer histories are cut by "
        "whole messages (practicum.agent.calls).",
    )
    submit_pattern: str | None = Field(
        None,
        description="A policy reply matching this regex "
        "ends the episode; it is graded as it stands.",
    )
    submit_file: str | None = Field(
        None,
        description="The episode ends once this file exists "
        "in the work folder; graded as it stands.",
    )
    grader: str | None = Field(
        None,
        description="module:function grading the outcome "
        "instead of the environment: f(task, AgentOutcome) -> StepResult "
        "or a float reward.",
    )
    format_pattern: str | None = Field(
        None, description="A regex a well-formed policy reply matches (the agent's action format)."
    )
    format_weight: float = Field(
        0.0,
        ge=0,
        description="A format reward for a cold policy: "
        "added to a graded episode's reward, times the share of its "
        "policy replies matching format_pattern (each turn's own "
        "match is its Turn.reward).",
    )
    grade_on_timeout: bool = Field(
        False,
        description="At the time limit, grade what the agent left instead of failing the episode.",
    )
    request_log: bool = Field(
        False,
        description="Write every engine call of the endpoint "
        "(prompt ids, sampled ids, log-probs, version) to "
        "RUN/agent_requests.jsonl.",
    )
    backend: str = Field("auto", description="Sandbox backend: auto, bwrap or namespaces.")

    @field_validator("grader")
    @classmethod
    def _module_function(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[\w.]+:\w+", v):
            raise ValueError(f"expected module:function, got {v!r}")
        return v

    @field_validator("submit_pattern", "format_pattern")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a regular expression ({e})") from None
        return v


class RolloutConfig(Section):
    group_size: int = Field(8, ge=1, description="Episodes per task (the GRPO group).")
    tasks_per_step: int = Field(
        3,
        ge=1,
        description="Tasks (groups) per training batch; a batch "
        "holds group_size * tasks_per_step episodes.",
    )
    max_turns: int = Field(2, ge=1, description="Policy turns per episode before truncation.")
    max_seq_len: int = Field(
        768,
        gt=0,
        description="Token budget of one training row (a "
        "segment: prompt + sampled + observations); generation is capped to "
        "the room left, and an episode that runs out of it is overlong. "
        "Refused when the run is placed if past the model's context "
        "(scaled by model.rope_scaling).",
    )
    failure_reward: float = Field(
        0.0, description="Reward of an episode ended by an environment failure."
    )
    env_workers: int = Field(8, ge=1, description="sync: threads stepping environments at once.")
    batching: Literal["groups", "streaming"] = Field(
        "groups",
        description="groups: the learner trains on complete groups (GRPO). streaming "
        "(async only): the learner trains on the first group_size * tasks_per_step episodes to "
        "finish, whatever their group, with a per-task running baseline (arXiv 2509.01684).",
    )
    agent: AgentConfig | None = Field(
        None,
        description="An outside agent program runs each episode, talking to an "
        "episode-scoped OpenAI-compatible endpoint of the policy (practicum.agent); None: the "
        "environment's own turns.",
    )


class AlgoConfig(Section):
    advantage: Literal["grpo", "rloo", "flow_grpo", "baseline"] | None = Field(
        None,
        description="Advantage estimator: grpo (group norm), rloo, flow_grpo (every turn a "
        "sample, arXiv 2510.05592), baseline (per-task running mean of earlier rewards). None = "
        "grpo with groups, baseline with streaming.",
    )
    baseline_window: int = Field(32, ge=1, description="baseline: rewards per task averaged.")
    scale_by_std: bool = Field(True, description="Divide group advantages by the group std.")
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO-clip eps_low: ratio floor 1 - low.")
    clip_high: float = Field(0.28, gt=0, description="eps_high (DAPO clip-higher): ceiling 1+high.")
    loss_agg: Literal["token_mean", "seq_mean"] = Field(
        "token_mean", description="token_mean over the batch (DAPO) or per-sequence mean (GRPO)."
    )
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the k3 KL to the frozen base (0=off); "
        "with full fine-tuning a frozen copy of the base is loaded.",
    )
    dynamic_sampling: bool | None = Field(
        None,
        description="Drop groups whose rewards are all equal and refill the batch (DAPO). "
        "None = on with groups; streaming has no groups.",
    )
    max_refill_rounds: int = Field(1, ge=0, description="Extra sampling rounds to refill a batch.")
    overlong_cache: int = Field(
        0,
        ge=0,
        description="DAPO soft overlong penalty window L_cache in tokens (0 = off), on the "
        "episode's sampled tokens against its response budget max_new_tokens * max_turns.",
    )
    mask_overlong: bool = Field(True, description="Exclude overlong episodes from the loss.")
    step_budget: int = Field(0, ge=0, description="Turns allowed before the step penalty (0=off).")
    step_penalty: float = Field(0.0, ge=0, description="Penalty per turn past step_budget.")
    duration_weights: bool = Field(
        False,
        description="Duration-aware weights dt / mean_batch(dt) (arXiv 2509.01684). Off "
        "by default: in both batching modes every episode is sampled fresh and consumed, so "
        "completions follow pi and there is no duration bias to remove; the weights then push "
        "toward slow actions (benchmarks/duration_bias.py measures both).",
    )
    duration_floor: float = Field(0.05, gt=0, description="Floor on dt in seconds.")
    duration_cap: float = Field(10.0, gt=0, description="Cap on a duration weight.")
    off_policy: Literal["none", "tis", "decoupled"] = Field(
        "tis",
        description="Correction for behaviour/learner mismatch: PPO clip around the "
        "behaviour policy (none), or around the proximal policy times truncated importance "
        "weights (tis) or with over-cap tokens dropped (decoupled, AReaL).",
    )
    is_cap: float = Field(2.0, gt=0, description="Cap of the behaviour importance weights.")


class TrainConfig(Section):
    steps: int = Field(16, ge=0, description="Training steps (one rollout batch each).")
    mini_batches: int = Field(
        2,
        ge=1,
        description="Optimizer updates per rollout batch (PPO/DAPO mini-batches): the "
        "batch is split into this many parts; the ratio is taken against log-probs computed once "
        "before the first update, so clipping binds from the second update on.",
    )
    epochs: int = Field(1, ge=1, description="Passes over the batch's mini-batches.")
    lr: float = Field(
        3e-4, ge=0, description="Peak learning rate (AdamW); 0 changes no weight (a control run)."
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    warmup_steps: int = Field(2, ge=0, description="Linear warm-up, in training steps.")
    schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="LR schedule after warm-up (one value per training step)."
    )
    micro_batch_size: int = Field(
        8,
        ge=1,
        description="Rows per forward/backward pass (gradients summed, so only speed "
        "and memory change). The default matches the default group_size: a micro-batch then "
        "holds one GRPO group, whose shared prompt the learner runs once. Unused when "
        "max_tokens_per_micro_batch is set.",
    )
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="Token budget of a micro-batch (for long rows): micro-batches "
        "are filled with whole rows, in order, up to this many tokens (prompt and completion; a "
        "longer row goes alone, never split), and each runs as one packed sequence whose rows "
        "attend only to themselves (varlen flash attention on CUDA with flash-attn installed, "
        "else causal attention per row): no padding is computed, and the loss and gradients are "
        "those of padded rows. None: micro_batch_size rows, padded to the longest. The ranks "
        "of a sharded learner get shares of about equal tokens either way.",
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global grad norm per update.")
    checkpoint_every: int = Field(5, ge=1, description="Save a checkpoint every N steps.")
    max_nonfinite_in_row: int = Field(
        3,
        ge=1,
        description="A non-finite gradient norm skips that optimizer update on every "
        "rank (weights and optimizer state unchanged; counted as train/skipped_nonfinite); this "
        "many such updates in a row stop the run with an error naming the step.",
    )
    max_skipped_batches: int = Field(
        4,
        ge=1,
        description="Stop with an error after this many batches in a row had nothing "
        "to train on (every group's rewards equal, or every episode stale); when every "
        "episode of those batches was solved, training ends as converged instead (final "
        "evaluation, summary's converged_at_step).",
    )


class EvalConfig(Section):
    every: int = Field(
        8,
        ge=0,
        description="Evaluate on held-out tasks every N steps, besides "
        "before and after training (0 = only before and after).",
    )
    size: int | None = Field(None, description="Held-out tasks per evaluation (None = all).")
    temperature: float = Field(0.0, ge=0, description="Evaluation temperature (0 = greedy).")


class RuntimeConfig(Section):
    """How batches are produced (where the parts run is `placement:`)."""

    mode: Literal["sync", "async"] = Field("sync", description="Runtime: sync GRPO loop or async.")
    num_actors: int = Field(8, ge=1, description="async: episodes in flight at once.")
    max_staleness: int = Field(
        2,
        ge=0,
        description="async: max policy versions between the "
        "sampling and the training of any token.",
    )
    staleness_policy: Literal["admission", "drop"] = Field(
        "admission",
        description="async: admission = open no more work than the bound allows "
        "and wait for a group about to go stale (nothing is discarded); drop = sample freely "
        "and discard groups that went stale.",
    )


class CurriculumConfig(Section):
    enabled: bool = Field(
        False,
        description="Skip training tasks that teach nothing: solved too "
        "often, or never solved (curriculum refresh, arXiv 2508.03501).",
    )
    max_solve_rate: float = Field(
        2 / 3,
        gt=0,
        le=1,
        description="Drop a task solved more often than this (after min_attempts).",
    )
    min_attempts: int = Field(8, ge=1, description="Attempts before a task may be dropped.")
    solved_reward: float = Field(
        1.0,
        description="For environments that do not say whether a "
        "task was solved: an episode with at least this reward is.",
    )


class RftConfig(Section):
    samples_per_task: int = Field(8, ge=1, description="Episodes sampled per training task (k).")
    tasks: int | None = Field(None, ge=1, description="Training tasks to sample (None = all).")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of the k samples.")
    min_reward: float = Field(
        1.0,
        description="For environments that do not say whether a task "
        "was solved: keep episodes with at least this reward.",
    )
    epochs: int = Field(2, ge=1, description="SFT passes over the kept episodes.")
    lr: float = Field(1e-4, gt=0, description="SFT learning rate (AdamW, constant).")
    batch_size: int = Field(8, ge=1, description="Rows per SFT optimizer update.")


class SftConfig(Section):
    source: Literal["demo", "teacher"] = Field(
        "demo",
        description="Where the training tasks' trajectories come from: demo = the "
        "environment's scripted demonstrator (SWE: written from the gold patches of training "
        "tasks only), teacher = the model `sft.teacher` acting in the environment.",
    )
    teacher: str | None = Field(
        None,
        description="Model-service spec of the teacher for "
        "source=teacher: openai:<base_url>|<model> (any "
        "OpenAI-compatible server), local:<model> or base.",
    )
    samples_per_task: int = Field(
        1,
        ge=1,
        description="Episodes per training task (a scripted demonstrator repeats itself: use 1).",
    )
    tasks: int | None = Field(None, ge=1, description="Training tasks used (None = all).")
    temperature: float = Field(0.0, ge=0, description="Teacher sampling temperature.")
    max_new_tokens: int = Field(
        512,
        ge=1,
        description="Teacher reply budget per turn (the "
        "reply is cut after its first stop string, as the policy's "
        "would be).",
    )
    epochs: int = Field(3, ge=1, description="SFT passes over the kept episodes.")
    lr: float = Field(1e-4, gt=0, description="SFT learning rate (AdamW, constant).")
    batch_size: int = Field(4, ge=1, description="Rows per SFT optimizer update.")

    @model_validator(mode="after")
    def _teacher(self) -> "SftConfig":
        if self.source == "teacher" and not self.teacher:
            raise ValueError(
                "sft.source=teacher needs sft.teacher (e.g. "
                "openai:http://127.0.0.1:8000/v1|my-model)"
            )
        if self.teacher:
            from practicum.engine.service import check_spec

            check_spec(self.teacher, "sft.teacher")
        return self


class StageConfig(Section):
    name: str = Field(description="Stage name; its run folder is RUN/<index>-<name>.")
    kind: Literal["sft", "rft", "rl"] = Field(
        description="sft = `practicum sft` (demonstrations or a teacher's trajectories), rft = "
        "`practicum rft`, rl = `practicum train`, each from the previous stage's policy."
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Dotted config keys changed for this stage, e.g. "
        "{rollout.max_turns: 8}; validated like command-line overrides.",
    )
    curriculum_refresh: bool = Field(
        False,
        description="Before this stage, drop training tasks that the earlier stages' "
        "episodes always or never solved (curriculum.min_attempts / max_solve_rate; "
        "arXiv 2508.03501 between its RL stages).",
    )


class Config(Section):
    run: RunConfig = Field(default_factory=RunConfig, description="Run folder, seed, resume.")
    model: ModelOptions = Field(
        default_factory=ModelOptions, description="Policy model (practicum.engine.options)."
    )
    engine: SerializeAsAny[EngineOptions] = Field(
        default_factory=HFOptions,
        description="Sampling engine: kind (hf | vllm | one a "
        "package registers) and that kind's options (practicum.engine.kinds).",
    )
    task: TaskConfig = Field(default_factory=TaskConfig, description="Environment and tasks.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Sampling.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Episodes.")
    algo: AlgoConfig = Field(default_factory=AlgoConfig, description="RL algorithm.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Optimisation.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    runtime: RuntimeConfig = Field(
        default_factory=RuntimeConfig, description="Runtime: sync or async batches, staleness."
    )
    placement: PlacementPlan = Field(
        default_factory=LocalPlacement,
        description="Where the learner, the sampler and the "
        "environments run (kind: local | ray | learner_group | torchrun; "
        "practicum.placement_plan).",
    )
    curriculum: CurriculumConfig = Field(
        default_factory=CurriculumConfig, description="Task filtering by solve rate."
    )
    rft: RftConfig = Field(
        default_factory=RftConfig, description="`practicum rft`: rejection fine-tuning."
    )
    sft: SftConfig = Field(
        default_factory=SftConfig,
        description="`practicum sft`: the "
        "warm start on demonstrations or a teacher's trajectories.",
    )
    stages: list[StageConfig] = Field(
        default_factory=list,
        description="A pipeline run by `practicum train` in order "
        "(practicum.stages), each stage from the previous one's policy; empty = one RL run.",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, tree: Any) -> Any:
        """An engine section without a kind is the default engine (hf); a placement section
        without one is local."""
        if isinstance(tree, dict):
            for section, kind in (("engine", "hf"), ("placement", "local")):
                if isinstance(tree.get(section), dict):
                    tree = {**tree, section: {"kind": kind, **tree[section]}}
        return tree

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_of_its_kind(cls, section: Any) -> Any:
        """The `engine:` section validated by the options model its kind registered
        (`practicum.engine.kinds`); an error's location names the kind, as a discriminated
        union's would (engine.<kind>.<key>)."""
        if not isinstance(section, dict):
            return section
        kind = str(section.get("kind"))
        entry = find_engine(kind)
        if entry is None:
            raise ValidationError.from_exception_data(
                "engine",
                [
                    {
                        "type": PydanticCustomError("unknown_engine", unknown_engine(kind)),
                        "loc": ("kind",),
                        "input": kind,
                    }
                ],
            )
        try:
            return entry.options.model_validate(section)
        except ValidationError as e:
            raise ValidationError.from_exception_data(
                e.title,
                [
                    {
                        "type": x["type"],
                        "loc": (kind, *x["loc"]),
                        "input": x["input"],
                        **({"ctx": x["ctx"]} if "ctx" in x else {}),
                    }
                    for x in e.errors()
                ],
            ) from None

    @model_validator(mode="after")
    def _check_weight_sync(self) -> "Config":
        """weight_sync=broadcast sends full weights (where the learner may sit for it:
        `check_plan`)."""
        engine = self.engine
        if engine.broadcasts_weights and self.model.lora:
            raise ValueError(
                "engine.weight_sync=broadcast sends full weights (model.lora="
                "false); LoRA adapters always reach the sampler whole (small)"
            )
        if (
            isinstance(engine, HFOptions)
            and engine.broadcasts_weights
            and self.placement.kind not in ("learner_group", "torchrun")
        ):
            raise ValueError(
                "engine.weight_sync=broadcast (hf) streams from a sharded learner: "
                "placement.kind learner_group or torchrun (a learner in one "
                "process hands its weights over whole)"
            )
        return self

    @property
    def streams_weights(self) -> bool:
        """A sharded learner streams each version to the sampler (engine.weight_sync=broadcast,
        full fine-tuning) rather than gathering it on its rank 0."""
        return (
            self.engine.broadcasts_weights
            and not self.model.lora
            and self.placement.kind in ("learner_group", "torchrun")
        )

    @model_validator(mode="after")
    def _check_placement(self) -> "Config":
        check_plan(self.placement, self.engine, self.model.device, self.stages)
        mesh = getattr(self.placement, "mesh", None)
        if (
            mesh is not None
            and mesh.sequence > 1
            and self.train.max_tokens_per_micro_batch is not None
        ):
            # Ulysses slices each padded row's positions; packed rows would need their segment
            # boundaries carried into every slice
            raise ValueError(
                "train.max_tokens_per_micro_batch: packed micro-batches do not "
                "run with sequence parallelism (placement.mesh.sequence="
                f"{mesh.sequence}); unset one of them"
            )
        return self

    @model_validator(mode="after")
    def _resolve(self) -> "Config":
        """Resolve the None defaults that depend on the batching mode; reject contradictions."""
        streaming = self.rollout.batching == "streaming"
        algo = self.algo
        if streaming and self.runtime.mode != "async":
            raise ValueError(
                "rollout.batching=streaming needs runtime.mode=async (a lockstep "
                "batch finishes together)"
            )
        if streaming and algo.advantage in ("grpo", "rloo", "flow_grpo"):
            raise ValueError(
                f"algo.advantage={algo.advantage} needs complete groups; streaming "
                f"batches take algo.advantage=baseline"
            )
        if streaming and algo.dynamic_sampling:
            raise ValueError(
                "algo.dynamic_sampling drops whole groups; streaming batches have none"
            )
        if algo.advantage is None:
            algo.advantage = "baseline" if streaming else "grpo"
        if algo.dynamic_sampling is None:
            algo.dynamic_sampling = not streaming
        batch = self.rollout.group_size * self.rollout.tasks_per_step
        if self.train.mini_batches > batch:
            raise ValueError(
                f"train.mini_batches={self.train.mini_batches} exceeds the "
                f"{batch} episodes of a batch"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.run.out_dir) / self.run.name


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        if node.get(k) is None:  # absent, or a null section (e.g. placement.engine: null)
            node[k] = {}
        node = node[k]
        if not isinstance(node, dict):
            raise ConfigError(f"config error at {dotted}: {k} is not a section")
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`train.lr=1e-4` -> ("train.lr", 1e-4); values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"config error: override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


RUN_FOLDER_SIGNS = ("metrics.jsonl", "episodes.jsonl", "checkpoints")
"""What a run folder holds beside the config.yaml its run wrote."""


def is_run_config(path: Path) -> bool:
    """A config.yaml that a run wrote into its run folder (read to resume, evaluate or serve
    that run), as opposed to a config a person wrote."""
    return path.name == "config.yaml" and any(
        (path.parent / sign).exists() for sign in RUN_FOLDER_SIGNS
    )


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """The validated config of a YAML file (None = the defaults) with dotted `overrides`.

    Keys that the `placement:` section replaced are refused, except in a run folder's stored
    config.yaml, which is migrated (`practicum.placement_plan.migrate`): runs written before
    the section existed still resume, evaluate and serve."""
    tree: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config error: file {str(p)!r} not found")
        try:
            tree = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config error: {p} is not valid YAML: {e}") from e
        if not isinstance(tree, dict):
            raise ConfigError(f"config error: {p} must hold a mapping of sections")
        if is_run_config(p):
            tree, moved = migrate(tree)
            if moved:
                log.info(
                    "%s: old placement keys migrated to placement.kind=%s (%s)",
                    p,
                    tree["placement"].get("kind"),
                    ", ".join(moved),
                )
    for o in overrides:
        set_dotted(tree, *parse_override(o))
    refuse_old_keys(tree)
    try:
        cfg = Config.model_validate(tree)
    except ValidationError as e:
        err = e.errors()[0]
        loc = list(err["loc"])
        variant = ""
        if loc[:1] in (["engine"], ["placement"]) and len(loc) > 2:  # a variant's tag
            variant = f" for {loc[0]}.kind={loc.pop(1)}"
        elif loc[:2] == ["model", "rope_scaling"] and len(loc) > 3:
            variant = f" for model.rope_scaling.rope_type={loc.pop(2)}"
        where = ".".join(str(x) for x in loc)
        got = err.get("input")
        if not where:  # a cross-field check of Config itself: the message names the keys
            raise ConfigError(f"config error: {err['msg'].removeprefix('Value error, ')}") from None
        msg = (
            "unknown key"
            if err["type"] == "extra_forbidden"
            else err["msg"].removeprefix("Value error, ")
        ) + variant
        raise ConfigError(f"config error at {where}: {msg} (got {got!r})") from None
    from practicum.envs.registry import parse_options

    options = parse_options(cfg.task.name, cfg.task.options)
    cfg.task.options = options.model_dump(mode="json")
    return cfg


def dump_config(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
