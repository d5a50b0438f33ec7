"""A bandit whose actions really take time: the test bed for asynchronous, duration-aware RL.

The policy picks one of a few named programs (default: `fast`, reward 0.3, ~0.1 s; `slow`,
reward 1.0, ~1 s) by replying `<choice>NAME</choice>`. The environment then really sleeps (or
burns CPU) for a duration drawn from a heavy-tailed distribution around the arm's mean, and
reports that wall time as the step's duration. With asynchronous actors the fast arm completes
~10x more often per second, which is exactly the bias duration-aware updates remove
(arXiv 2509.01684; see `practicum.runtime.duration_bias`).

Options (`task.options`), all optional:
  arms:          {name: {reward: float, seconds: float}}, mean duration per arm before time_scale
  distribution:  "lognormal" (sigma) or "pareto" (pareto_alpha); both keep the arm's mean
  sigma:         lognormal shape (default 1.0: the slowest of 8 draws is ~3x the mean)
  pareto_alpha:  Pareto tail index > 1 (default 1.5: infinite variance)
  time_scale:    multiplies every duration (default 1.0)
  work:          "sleep" (default; a remote sandbox running code) or "compute" (a busy loop)
  turns:         actions per episode (default 1); the final reward is the mean arm reward
  fallback_arm:  arm name, "random", or null (default): what an unparsable reply runs; null ends
                 the episode as a failure. Runtime benchmarks with an untrained model use "random".
  step_timeout:  seconds before the child process running a step is killed (default 60)
  process:       run every episode's env in its own child process (default true)
  faults:        fault-injection rates, see `practicum.envs.faults` (default none)
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from practicum.envs.base import StepResult, Task

SYSTEM_PROMPT = "You choose which program to run. Each program takes time and earns a score."
_CHOICE = re.compile(r"<choice>\s*([A-Za-z_]+)\s*</choice>", re.I)


@dataclass(frozen=True)
class Arm:
    name: str
    reward: float
    """Reward of one completed run of this program."""
    seconds: float
    """Mean run time in seconds (before `BanditSpec.time_scale`)."""


@dataclass(frozen=True)
class BanditSpec:
    """Everything a `TimedBanditEnv` needs; built from `task.options` by `from_options`."""

    arms: tuple[Arm, ...] = (Arm("fast", 0.3, 0.1), Arm("slow", 1.0, 1.0))
    distribution: str = "lognormal"
    sigma: float = 1.0
    pareto_alpha: float = 1.5
    time_scale: float = 1.0
    work: str = "sleep"
    turns: int = 1
    fallback_arm: str | None = None
    step_timeout: float = 60.0
    process: bool = True
    faults: dict[str, float] = field(default_factory=dict)
    failure_reward: float = 0.0

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)

    @classmethod
    def from_options(cls, options: dict[str, Any], failure_reward: float = 0.0) -> "BanditSpec":
        known = {"arms", "distribution", "sigma", "pareto_alpha", "time_scale", "work", "turns",
                 "fallback_arm", "step_timeout", "process", "faults"}
        for key in options:
            if key not in known:
                raise ValueError(f"config error at task.options.{key}: unknown timed_bandit option "
                                 f"(known: {', '.join(sorted(known))})")
        kw: dict[str, Any] = {k: v for k, v in options.items() if k != "arms"}
        if "arms" in options:
            arms = []
            for name, a in dict(options["arms"]).items():
                if not isinstance(a, dict) or set(a) != {"reward", "seconds"}:
                    raise ValueError(f"config error at task.options.arms.{name}: expected "
                                     f"{{reward: float, seconds: float}}, got {a!r}")
                arms.append(Arm(str(name), float(a["reward"]), float(a["seconds"])))
            kw["arms"] = tuple(arms)
        spec = cls(**kw, failure_reward=failure_reward)
        spec.validate()
        return spec

    def validate(self) -> None:
        def bad(key: str, msg: str) -> ValueError:
            return ValueError(f"config error at task.options.{key}: {msg}")

        if len(self.arms) < 2:
            raise bad("arms", f"a bandit needs at least 2 arms, got {len(self.arms)}")
        if any(a.seconds < 0 for a in self.arms):
            raise bad("arms", "every arm needs seconds >= 0")
        if self.distribution not in ("lognormal", "pareto"):
            raise bad("distribution", f"expected lognormal or pareto, got {self.distribution!r}")
        if self.sigma < 0 or self.pareto_alpha <= 1 or self.time_scale < 0:
            raise bad("sigma", "need sigma >= 0, pareto_alpha > 1 and time_scale >= 0")
        if self.work not in ("sleep", "compute"):
            raise bad("work", f"expected sleep or compute, got {self.work!r}")
        if self.turns < 1:
            raise bad("turns", f"expected an integer >= 1, got {self.turns}")
        names = {a.name for a in self.arms}
        if self.fallback_arm not in (None, "random", *names):
            raise bad("fallback_arm", f"expected null, random or one of {sorted(names)}, "
                                      f"got {self.fallback_arm!r}")


def draw_duration(rng: random.Random, mean: float, distribution: str = "lognormal",
                  sigma: float = 1.0, pareto_alpha: float = 1.5) -> float:
    """A heavy-tailed run time with the given mean.

    lognormal: exp(N(mu, sigma^2)) with mu = ln(mean) - sigma^2 / 2, so E = mean.
    pareto:    x_m * U^(-1/alpha) with x_m = mean (alpha - 1) / alpha, so E = mean (alpha > 1).
    """
    if mean <= 0:
        return 0.0
    if distribution == "pareto":
        x_m = mean * (pareto_alpha - 1) / pareto_alpha
        return x_m * (1.0 - rng.random()) ** (-1.0 / pareto_alpha)
    return rng.lognormvariate(math.log(mean) - sigma ** 2 / 2, sigma)


def parse_choice(reply: str, names: list[str]) -> str | None:
    """The arm a reply picks: `<choice>NAME</choice>`, else a reply naming exactly one arm as a
    word; None when it names none or several."""
    lowered = {n.lower(): n for n in names}
    tag = _CHOICE.search(reply)
    if tag:
        return lowered.get(tag.group(1).lower())
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


def prompt(spec: BanditSpec) -> str:
    names = [a.name for a in spec.arms]
    listed = ", ".join(f"<choice>{n}</choice>" for n in names)
    return (f"Pick a program to run: {', '.join(names)}. Reply with exactly one of: {listed}.")


class TimedBanditEnv:
    """One episode = `spec.turns` choices; each really runs for its drawn duration."""

    system_prompt = SYSTEM_PROMPT

    def __init__(self, spec: BanditSpec, seed: int = 0):
        self.spec = spec
        self.rng = random.Random(seed)
        self._rewards: list[float] = []

    def reset(self, task: Task) -> str:
        self._rewards = []
        return prompt(self.spec)

    def step(self, action: str) -> StepResult:
        spec = self.spec
        name = parse_choice(action, [a.name for a in spec.arms])
        info: dict[str, Any] = {}
        if name is None and spec.fallback_arm is not None:
            name = (self.rng.choice(spec.arms).name if spec.fallback_arm == "random"
                    else spec.fallback_arm)
            info["fallback"] = True
        if name is None:
            return StepResult(f"Unparsable reply. {prompt(spec)}", spec.failure_reward, True,
                              info={"failure": f"unparsable action: {action[:80]!r}"})
        arm = spec.arm(name)
        planned = draw_duration(self.rng, arm.seconds * spec.time_scale, spec.distribution,
                                spec.sigma, spec.pareto_alpha)
        duration = run_for(planned, spec.work)
        self._rewards.append(arm.reward)
        done = len(self._rewards) >= spec.turns
        reward = sum(self._rewards) / len(self._rewards) if done else arm.reward
        obs = f"{arm.name} finished in {duration:.2f} s with score {arm.reward:g}. Choose again."
        return StepResult(obs, reward, done, duration=duration,
                          info={**info, "arm": arm.name, "planned_seconds": planned})

    def close(self) -> None:
        pass


class BanditEnvFactory:
    """`Suite.make_env` for the timed bandit: a fresh env per episode, each with its own seed,
    in its own child process when `spec.process` (optionally with injected faults)."""

    def __init__(self, spec: BanditSpec, seed: int = 0):
        self.spec, self.seed = spec, seed
        self._count = itertools.count()

    def __call__(self):
        n = next(self._count)  # atomic under the GIL: safe from many actor threads
        env_seed = (self.seed * 1_000_003 + n) % 2 ** 63
        make = partial(TimedBanditEnv, self.spec, env_seed)
        if self.spec.faults:
            from practicum.envs.faults import FaultyEnv

            make = partial(FaultyEnv, make, dict(self.spec.faults), env_seed)
        if not self.spec.process:
            return make()
        from practicum.envs.process_env import ProcessEnv

        return ProcessEnv(make, step_timeout=self.spec.step_timeout,
                          failure_reward=self.spec.failure_reward)


def timed_bandit_suite(cfg):
    """The `timed_bandit` suite: identical single-state tasks (one GRPO group per task)."""
    from practicum.suites import Suite

    spec = BanditSpec.from_options(cfg.task.options, failure_reward=cfg.rollout.failure_reward)
    train = [Task(f"bandit/train/{i}") for i in range(cfg.task.train_size)]
    held_out = [Task(f"bandit/eval/{i}") for i in range(cfg.task.eval_size)]
    return Suite(BanditEnvFactory(spec, cfg.run.seed), train, held_out)
