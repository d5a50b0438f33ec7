"""A bandit whose actions really take time: the test bed for asynchronous, duration-aware RL.

The policy picks one of a few named programs (default: `fast`, reward 0.3, ~0.1 s; `slow`,
reward 1.0, ~1 s) by replying `<choice>NAME</choice>`. The environment then really sleeps (or
burns CPU) for a duration drawn from a heavy-tailed distribution around the arm's mean, and
reports that wall time as the step's duration, the input of duration-aware weights
(arXiv 2509.01684; benchmarks/duration_bias.py measures when asynchronous training is biased
toward fast arms and what the weights do). Options: `BanditOptions`.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
from dataclasses import dataclass
from functools import partial
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from practicum.envs.audit import AuditSpec
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.registry import Suite, SuiteContext, register_env
from practicum.errors import ConfigError

SYSTEM_PROMPT = "You choose which program to run. Each program takes time and earns a score."
_CHOICE = re.compile(r"<choice>\s*([A-Za-z_]+)\s*</choice>", re.I)


@dataclass(frozen=True)
class Arm:
    name: str
    reward: float
    """Reward of one completed run of this program."""
    seconds: float
    """Mean run time in seconds (before `BanditSpec.time_scale`)."""


class ArmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reward: float = Field(description="Reward of one completed run of this program.")
    seconds: float = Field(ge=0, description="Mean run time in seconds (before time_scale).")


class BanditOptions(BaseModel):
    """`task.options` of the timed bandit (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arms: dict[str, ArmOptions] = Field(
        default_factory=lambda: {
            "fast": ArmOptions(reward=0.3, seconds=0.1),
            "slow": ArmOptions(reward=1.0, seconds=1.0),
        },
        description="Programs the policy can run: name -> {reward, seconds}.",
    )
    distribution: Literal["lognormal", "pareto"] = Field("lognormal", description="Run times.")
    sigma: float = Field(1.0, ge=0, description="Lognormal shape.")
    pareto_alpha: float = Field(1.5, gt=1, description="Pareto tail index.")
    time_scale: float = Field(1.0, ge=0, description="Multiplies every duration.")
    work: Literal["sleep", "compute"] = Field("sleep", description="How a run spends its time.")
    turns: int = Field(1, ge=1, description="Actions per episode.")
    fallback_arm: str | None = Field(
        None,
        description="Arm name, random, or null: what an "
        "unparsable reply runs (null ends the episode malformed).",
    )
    step_timeout: float = Field(
        60.0, gt=0, description="Seconds before a step's child process is killed."
    )
    process: bool = Field(True, description="Run every episode's env in its own child process.")
    faults: dict[str, float] = Field(
        default_factory=dict, description="Fault-injection rates (practicum.envs.faults)."
    )
    train_size: int = Field(64, gt=0, description="Training tasks (identical states).")
    eval_size: int = Field(8, gt=0, description="Held-out tasks.")

    @model_validator(mode="after")
    def _check(self) -> "BanditOptions":
        if len(self.arms) < 2:
            raise ValueError(f"a bandit needs at least 2 arms, got {len(self.arms)}")
        from practicum.envs.faults import check_faults

        check_faults(self.faults)
        if self.fallback_arm not in (None, "random", *self.arms):
            raise ValueError(
                f"fallback_arm must be null, random or one of {sorted(self.arms)}, "
                f"got {self.fallback_arm!r}"
            )
        return self

    def arm_list(self) -> tuple[Arm, ...]:
        return tuple(Arm(name, a.reward, a.seconds) for name, a in self.arms.items())


def draw_duration(
    rng: random.Random,
    mean: float,
    distribution: str = "lognormal",
    sigma: float = 1.0,
    pareto_alpha: float = 1.5,
) -> float:
    """A heavy-tailed run time with the given mean.

    lognormal: exp(N(mu, sigma^2)) with mu = ln(mean) - sigma^2 / 2, so E = mean.
    pareto:    x_m * U^(-1/alpha) with x_m = mean (alpha - 1) / alpha, so E = mean (alpha > 1).
    """
    if mean <= 0:
        return 0.0
    if distribution == "pareto":
        x_m = mean * (pareto_alpha - 1) / pareto_alpha
        return x_m * (1.0 - rng.random()) ** (-1.0 / pareto_alpha)
    return rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)


def parse_choice(reply: str, names: list[str]) -> str | None:
    """The arm a reply picks: `<choice>NAME</choice>`, else a reply naming exactly one arm as a
    word; None when it names none or several (tags or words: an echo of the prompt's list
    would otherwise earn the first arm, found by `practicum audit`)."""
    lowered = {n.lower(): n for n in names}
    tags = {t.lower() for t in _CHOICE.findall(reply)}
    if tags:  # several different tags (the prompt's list echoed) pick nothing
        return lowered.get(tags.pop()) if len(tags) == 1 else None
    found = {lowered[w] for w in re.findall(r"[A-Za-z_]+", reply.lower()) if w in lowered}
    return found.pop() if len(found) == 1 else None


def run_for(seconds: float, work: str = "sleep") -> float:
    """Really spend `seconds` (sleeping, or a CPU busy loop); returns the measured wall time."""
    start = time.perf_counter()
    if work == "compute":
        end = start + seconds
        x = 0
        while time.perf_counter() < end:
            x += sum(range(200))
    else:
        time.sleep(seconds)
    return time.perf_counter() - start


def prompt(arms: tuple[Arm, ...]) -> str:
    names = [a.name for a in arms]
    listed = ", ".join(f"<choice>{n}</choice>" for n in names)
    return f"Pick a program to run: {', '.join(names)}. Reply with exactly one of: {listed}."


class TimedBanditEnv(Env):
    """One episode = `opts.turns` choices; each really runs for its drawn duration."""

    def __init__(self, opts: BanditOptions):
        self.opts, self.arms = opts, opts.arm_list()
        self.rng = random.Random(0)
        self._rewards: list[float] = []

    def reset(self, task: Task, seed: int = 0) -> Start:
        self.rng = random.Random(seed)
        self._rewards = []
        return Start(
            [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": prompt(self.arms)},
            ]
        )

    def step(self, action: str) -> StepResult:
        opts = self.opts
        name = parse_choice(action, [a.name for a in self.arms])
        malformed = name is None
        if name is None and opts.fallback_arm is not None:
            name = (
                self.rng.choice(self.arms).name
                if opts.fallback_arm == "random"
                else opts.fallback_arm
            )
        if name is None:
            return StepResult(
                f"Unparsable reply. {prompt(self.arms)}", malformed=True, done=True, reward=0.0
            )
        arm = next(a for a in self.arms if a.name == name)
        planned = draw_duration(
            self.rng,
            arm.seconds * opts.time_scale,
            opts.distribution,
            opts.sigma,
            opts.pareto_alpha,
        )
        duration = run_for(planned, opts.work)
        self._rewards.append(arm.reward)
        done = len(self._rewards) >= opts.turns
        reward = sum(self._rewards) / len(self._rewards) if done else arm.reward
        obs = f"{arm.name} finished in {duration:.2f} s with score {arm.reward:g}. Choose again."
        best = max(a.reward for a in self.arms)
        return StepResult(
            obs,
            reward,
            done,
            duration=duration,
            malformed=malformed,
            solved=(reward >= best) if done else None,
            metrics={f"arm_{arm.name}": 1.0, "seconds": duration},
            info={"arm": arm.name, "planned_seconds": planned},
        )


def bandit_env(opts: BanditOptions, models=None) -> Env:
    return TimedBanditEnv(opts)


def faulty_bandit_env(opts: BanditOptions, seed: int, models=None) -> Env:
    from practicum.envs.faults import FaultyEnv

    return FaultyEnv(partial(TimedBanditEnv, opts), dict(opts.faults), seed)


class BanditEnvFactory:
    """`Suite.make_env` for the timed bandit: a fresh env per episode, in its own child process
    when `opts.process` (optionally with injected faults)."""

    def __init__(self, opts: BanditOptions, seed: int = 0, failure_reward: float = 0.0):
        self.opts, self.seed, self.failure_reward = opts, seed, failure_reward
        self._count = itertools.count()

    def __call__(self, models=None) -> Env:
        n = next(self._count)  # atomic under the GIL: safe from many actor threads
        make = (
            partial(faulty_bandit_env, self.opts, (self.seed * 1_000_003 + n) % 2**63)
            if self.opts.faults
            else partial(bandit_env, self.opts)
        )
        if not self.opts.process:
            return make(models)
        from practicum.envs.process_env import ProcessEnv

        return ProcessEnv(
            make, models, step_timeout=self.opts.step_timeout, failure_reward=self.failure_reward
        )


def timed_bandit_suite(opts: BanditOptions, ctx: SuiteContext) -> Suite:
    """Programs that really take time: the test bed for async, duration-aware RL."""
    if opts.faults.get("step_kill") and not opts.process:
        raise ConfigError(
            "config error at task.options.faults: step_kill would kill the "
            "trainer; it needs task.options.process=true"
        )
    train = [Task(f"bandit/train/{i}") for i in range(opts.train_size)]
    held_out = [Task(f"bandit/eval/{i}") for i in range(opts.eval_size)]
    return Suite(BanditEnvFactory(opts, ctx.seed, ctx.failure_reward), train, held_out)


def timed_bandit_audit(opts: BanditOptions) -> AuditSpec:
    """`practicum audit`: an unparsable reply earns 0, unless `fallback_arm` runs an arm for it
    (then up to the best arm's reward, by design); the honest reference picks the best arm."""
    best = max(opts.arm_list(), key=lambda a: a.reward)
    floor = 0.0 if opts.fallback_arm is None else best.reward
    return AuditSpec(
        floor=floor,
        honest=lambda p: f"<choice>{best.name}</choice>",
        answer=lambda text: f"<choice>{text}</choice>",
    )


register_env("timed_bandit", BanditOptions, timed_bandit_suite, audit=timed_bandit_audit)
