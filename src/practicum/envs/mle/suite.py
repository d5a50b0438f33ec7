"""The `mle` task suite: competitions split into training and held-out sets, and the env factory.

`mle_suite(cfg)` reads `cfg.task.options` (every key optional; `MleOptions` documents each one
and its default). The held-out competitions are a fixed, named subset (default: three of the
eleven bundled ones, one per kind of task); training uses the rest, minus `exclude`.

    task:
      name: mle
      options: {mode: template, instrumenter: rules, held_out: [iris-species, ...],
                exclude: [health-insurance-visits], eval_repeats: 8, wall_seconds: 30}
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from practicum.envs.base import Task
from practicum.envs.mle.competition_folder import load_folder
from practicum.envs.mle.competition_registry import discover
from practicum.envs.mle.env import CompetitionData, EnvSettings, MleEnv, load_competition_data
from practicum.envs.mle.rewards import RewardConfig
from practicum.envs.mle.self_improve import SolutionBuffer
from practicum.envs.sandbox import Limits

DEFAULT_HELD_OUT = ("iris-species", "breast-cancer-diagnosis", "diabetes-progression")
"""Held out by default: a multi-class, a binary (AUC) and a regression competition."""


class MleOptions(BaseModel):
    """`task.options` of the mle suite."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["template", "script"] = Field(
        "template", description="template: fill one marked line of a fixed script (small "
        "models); script: a plan and a whole Python script.")
    instrumenter: str = Field(
        "policy_base", description="Who inserts milestone prints: policy_base (the policy's "
        "frozen base weights), rules, local:<model>, openai:<base_url>|<model>.")
    held_out: list[str] = Field(list(DEFAULT_HELD_OUT), description="Held-out competition ids.")
    train: list[str] | None = Field(
        None, description="Training competition ids; None = every other known competition.")
    exclude: list[str] = Field(default_factory=list,
                               description="Competitions never used for training.")
    train_repeats: int = Field(1, ge=1, description="Copies of each training competition per "
                               "pass of the task cursor (weights the mix when uneven).")
    eval_repeats: int = Field(1, ge=1, description="Episodes per held-out competition in one "
                              "evaluation (use > 1 with sampling, eval.temperature > 0).")
    competitions_dirs: list[str] = Field(default_factory=list, description="Extra folders of "
                                         "competitions, searched before the bundled suite.")
    data_root: str | None = Field(None, description="Prepared data root (default "
                                  "$PRACTICUM_DATA/mle or ~/.cache/practicum/mle).")
    wall_seconds: float = Field(60.0, gt=0, description="Wall-clock limit of one run.")
    memory_mb: int = Field(2048, gt=0, description="Memory limit of one run.")
    max_processes: int = Field(64, gt=0, description="Processes + threads of one run.")
    backend: str = Field("auto", description="Sandbox backend: auto, bwrap, namespaces.")
    attempts: int = Field(1, ge=1, description="Actions per episode (multi-turn when > 1).")
    improve_prob: float = Field(0.5, ge=0, le=1, description="Probability of a self-"
                                "improvement prompt when the task has a stored solution.")
    buffer_size: int = Field(4, ge=1, description="Solutions kept per competition.")
    failure_reward: float = Field(-10.0, description="Reward of a run without valid submission.")
    milestone_credit: float = Field(0.1, ge=0, description="Credit per distinct milestone.")
    partial_credit: bool = Field(True, description="Milestone credit on (False: ablation).")
    lower_is_better_transform: Literal["negate", "exp", "inverse"] = Field(
        "inverse", description="Orientation of lower-is-better scores. The paper negates (one "
        "task per run); across tasks an RMSE of 60 would then fall below the failure reward, "
        "so the default maps v to 1 / (1 + v / beta).")
    beta: float = Field(3.0, gt=0, description="Scale of the exp/inverse transforms.")
    salvage: bool = Field(True, description="Template mode: accept a lone `model = ...` line "
                          "found inside an otherwise malformed reply.")
    output_chars: int = Field(600, gt=0, description="Run output shown to the agent.")
    workdir_root: str | None = Field(None, description="Where work folders are created.")


def parse_options(options: dict) -> MleOptions:
    try:
        return MleOptions.model_validate(options or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = "unknown mle option" if first["type"] == "extra_forbidden" else first["msg"]
        raise ValueError(f"config error at task.options.{where}: {msg} "
                         f"(got {first.get('input')!r})") from None


def settings_of(opts: MleOptions) -> EnvSettings:
    limits = Limits(wall_seconds=opts.wall_seconds, memory_mb=opts.memory_mb,
                    max_processes=opts.max_processes)
    reward = RewardConfig(failure_reward=opts.failure_reward,
                          milestone_credit=opts.milestone_credit,
                          partial_credit=opts.partial_credit,
                          lower_is_better_transform=opts.lower_is_better_transform,
                          beta=opts.beta)
    return EnvSettings(mode=opts.mode, limits=limits, backend=opts.backend,
                       attempts=opts.attempts, improve_prob=opts.improve_prob, reward=reward,
                       salvage=opts.salvage, output_chars=opts.output_chars,
                       workdir_root=opts.workdir_root)


class CompetitionCache:
    """Competition id -> CompetitionData, prepared and loaded on first use (thread-safe)."""

    def __init__(self, folders: dict[str, Path], data_root: Path | None):
        self.folders, self.data_root = folders, data_root
        self._loaded: dict[str, CompetitionData] = {}
        self._lock = threading.Lock()

    def __getitem__(self, cid: str) -> CompetitionData:
        with self._lock:
            if cid not in self._loaded:
                if cid not in self.folders:
                    raise KeyError(f"unknown competition '{cid}' (known: "
                                   f"{', '.join(sorted(self.folders))})")
                comp = load_folder(self.folders[cid])
                self._loaded[cid] = load_competition_data(comp, self.data_root)
            return self._loaded[cid]


class MleEnvFactory:
    """`Suite.make_env`: a fresh MleEnv per episode sharing competitions, buffer, instrumenter."""

    def __init__(self, settings: EnvSettings, competitions: CompetitionCache,
                 buffer: SolutionBuffer, instrumenter: str, base_model: str,
                 dtype: str = "auto", seed: int = 0):
        self.settings, self.competitions, self.buffer = settings, competitions, buffer
        self.instrumenter, self.base_model, self.dtype = instrumenter, base_model, dtype
        self.seed = seed
        self._llm = None
        self._llm_built = False
        self._count = itertools.count()

    def bind_policy(self, policy, lock=None) -> None:
        """Use the live policy's frozen base (adapter disabled) for `policy_base`
        instrumentation instead of a separate copy; `lock` must serialise every use of the
        policy (see instrumenters.py)."""
        from practicum.envs.mle.instrument import LLMInstrumenter
        from practicum.envs.mle.instrumenters import FrozenModel

        if self.instrumenter == "policy_base":
            self._llm = LLMInstrumenter(FrozenModel.from_policy(policy, lock))
            self._llm_built = True

    def llm(self):
        if not self._llm_built:
            from practicum.envs.mle.instrumenters import make_instrumenter

            self._llm = make_instrumenter(self.instrumenter, self.base_model, self.dtype)
            self._llm_built = True
        return self._llm

    def __call__(self) -> MleEnv:
        n = next(self._count)
        return MleEnv(self.settings, self.competitions, self.buffer, self.llm(),
                      seed=(self.seed * 1_000_003 + n) % 2**63)


def split_competitions(known: list[str], opts: MleOptions) -> tuple[list[str], list[str]]:
    """(train ids, held-out ids); every named id must exist and the two sets must not meet."""
    def check(ids: list[str], key: str) -> None:
        unknown = [c for c in ids if c not in known]
        if unknown:
            raise ValueError(f"config error at task.options.{key}: unknown competition(s) "
                             f"{unknown} (known: {', '.join(known)})")

    check(opts.held_out, "held_out")
    check(opts.exclude, "exclude")
    if opts.train is not None:
        check(opts.train, "train")
    held = list(dict.fromkeys(opts.held_out))
    pool = opts.train if opts.train is not None else known
    train = [c for c in dict.fromkeys(pool) if c not in held and c not in opts.exclude]
    overlap = sorted(set(opts.train or []) & set(held))
    if overlap:
        raise ValueError(f"config error at task.options.train: {overlap} are also held out")
    if not train:
        raise ValueError("config error at task.options: no training competitions left")
    if not held:
        raise ValueError("config error at task.options.held_out: name at least one competition")
    return train, held


def mle_suite(cfg):
    """The `mle` Suite: make_env, training tasks, held-out tasks (see module docstring)."""
    from practicum.suites import Suite

    opts = parse_options(cfg.task.options)
    folders = discover([Path(d) for d in opts.competitions_dirs])
    train_ids, held_ids = split_competitions(sorted(folders), opts)
    data_root = Path(opts.data_root) if opts.data_root else None
    cache = CompetitionCache(folders, data_root)
    for cid in train_ids + held_ids:  # prepare now: a broken competition fails the start
        cache[cid]
    buffer = SolutionBuffer(k=opts.buffer_size)
    factory = MleEnvFactory(settings_of(opts), cache, buffer,
                            opts.instrumenter, cfg.model.model, cfg.model.dtype, cfg.run.seed)
    factory.llm()  # validates the instrumenter spec now (a model loads only on first use)
    train = [Task(cid, {"competition": cid, "split": "train"})
             for _ in range(opts.train_repeats) for cid in train_ids]
    held_out = [Task(f"{cid}#{k}" if opts.eval_repeats > 1 else cid,
                     {"competition": cid, "split": "eval"})
                for cid in held_ids for k in range(opts.eval_repeats)]
    return Suite(factory, train, held_out, state=buffer.state, load_state=buffer.load_state)
