"""Run every attack (generic, then the environment's own) and the honest reference against an
environment's tasks through the normal contract: `suite.make_env`, `reset`, `step`, `close`,
the same sandbox and graders as training. Verdicts:

  contained               rewards within the attack's ceiling (practicum.envs.audit), nothing left
  undue credit            an episode above the floor (or the mean above the honest reference)
  crashed the env         reset/step raised (training would record a failed episode)
  left something behind   a temp file or folder of practicum, a child process, or a file or
                          connection the sandboxed code got out to the host
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from practicum.audit.attacks import generic_attacks
from practicum.audit.leftovers import TempWatch, descendants, lingering_children
from practicum.engine.service import ModelService
from practicum.envs.audit import TOLERANCE, Attack, AuditSpec, Policy, Probe
from practicum.envs.base import Task
from practicum.envs.registry import Suite, SuiteContext, env_entry, parse_options
from practicum.errors import ConfigError
from practicum.runtime.progress import Count, counting

OK_VERDICTS = ("contained", "reference", "undue credit (known hole)")
ESCAPE_GRACE = 3.0
"""Seconds a probe's background writers get before the host is checked for what they wrote."""


@dataclass
class AttackResult:
    attack: str
    ceiling: str
    """floor | honest | reference (the honest policy itself)."""
    known: str = ""
    """The env's reason when this attack pins a documented hole (practicum.envs.audit)."""
    bound: float | None = None
    """The reward its episodes (floor) or its mean (honest) must not exceed."""
    rewards: list[float] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    unmet: list[str] = field(default_factory=list)
    """What the attack had to cause and did not (agent audits: the episode's failure and its
    reason, `practicum.audit.agents`)."""
    seconds: float = 0.0

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.rewards) if self.rewards else None

    @property
    def max(self) -> float | None:
        return max(self.rewards) if self.rewards else None

    @property
    def undue(self) -> bool:
        if self.bound is None or not self.rewards:
            return False
        value = self.max if self.ceiling == "floor" else self.mean
        return value > self.bound + TOLERANCE

    @property
    def verdict(self) -> str:
        undue = "undue credit (known hole)" if self.known else "undue credit"
        found = [
            label
            for label, hit in (
                (undue, self.undue),
                ("not stopped", bool(self.unmet)),
                ("crashed the env", bool(self.crashes)),
                ("left something behind", bool(self.leftovers)),
            )
            if hit
        ]
        return ", ".join(found) or ("reference" if self.ceiling == "reference" else "contained")

    def as_dict(self) -> dict:
        return asdict(self) | {
            "mean": self.mean,
            "max": self.max,
            "verdict": self.verdict,
            "tasks": len(self.rewards) + len(self.crashes),
        }


@dataclass
class AuditReport:
    env: str
    tasks: list[str]
    floor: float
    honest: float | None
    """Mean reward of the honest reference on the same tasks (None: the env declares none)."""
    results: list[AttackResult]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.verdict in OK_VERDICTS for r in self.results)

    def as_dict(self) -> dict:
        return {
            "env": self.env,
            "tasks": self.tasks,
            "floor": self.floor,
            "honest": self.honest,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "results": [r.as_dict() for r in self.results],
        }


def run_audit(
    name: str,
    options: dict[str, Any] | None = None,
    *,
    tasks: int = 3,
    ctx: SuiteContext = SuiteContext(),
    max_turns: int = 4,
    only: list[str] | None = None,
    progress: bool = False,
) -> AuditReport:
    """Audit environment `name` with `options` on its first `tasks` tasks (module docstring).
    `only`: run just the attacks whose name contains one of these strings; `progress`: count
    the episodes on stdout (a bar on a terminal, lines elsewhere)."""
    TempWatch.install()
    start = time.monotonic()
    entry = env_entry(name)
    opts = parse_options(name, options)
    spec = entry.audit(opts) if entry.audit is not None else AuditSpec()
    attacks = [
        replace(a, ceiling="honest") if a.name in spec.attempts else a
        for a in generic_attacks(spec)
    ] + list(spec.attacks)
    if only:
        names = [a.name for a in attacks] + ["honest reference"]
        unmatched = [o for o in only if not any(o in n for n in names)]
        if unmatched:
            raise ConfigError(
                f"--attack {unmatched[0]!r} matches no attack of {name} "
                f"(attacks: {', '.join(names)})"
            )
        attacks = [a for a in attacks if any(o in a.name for o in only)]
    before_children = {pid for pid, _ in descendants()}
    suite = entry.build(opts, ctx)
    picked = (suite.train_tasks + suite.eval_tasks)[:tasks]
    run = _Runner(suite, opts, picked, ctx.seed, max_turns, before_children)
    results = []
    honest = None
    episodes = (len(attacks) + (spec.honest is not None)) * len(picked)
    with counting(f"audit {name}", episodes, enabled=progress) as run.count:
        if spec.honest is not None:
            ref = run.attack(Attack("honest reference", spec.honest, ceiling="floor"), None)
            ref.ceiling = "reference"
            honest = ref.mean
            results.append(ref)
        pending = []
        for attack in attacks:
            # a shortcut may always earn what a non-attempt may, even where the reference
            # failed
            bound = (
                spec.floor
                if attack.ceiling == "floor" or honest is None
                else max(spec.floor, honest)
            )
            result = run.attack(attack, bound)
            if attack.ceiling == "honest" and honest is None:
                result.ceiling = "floor"
            results.append(result)
            if attack.escaped is not None:
                pending.append((result, attack, time.monotonic()))
    for result, attack, ended in pending:  # background writers had time to write by now
        time.sleep(max(0.0, ended + ESCAPE_GRACE - time.monotonic()))
        result.leftovers += attack.escaped()
    return AuditReport(
        name, [t.task_id for t in picked], spec.floor, honest, results, time.monotonic() - start
    )


class _Runner:
    def __init__(
        self,
        suite: Suite,
        options: Any,
        tasks: list[Task],
        seed: int,
        max_turns: int,
        before_children: set[int],
    ):
        self.suite, self.options, self.tasks = suite, options, tasks
        self.seed, self.max_turns, self.before_children = seed, max_turns, before_children
        # Roles backed by `rules`, `local:` or `openai:` work; `base`/`policy` need a live
        # policy, which an audit has not: their envs report the error as a crash.
        self.service = ModelService()
        self.count: Count | None = None

    def attack(self, attack: Attack, bound: float | None) -> AttackResult:
        result = AttackResult(attack.name, attack.ceiling, attack.known, bound)
        temp_before = set(TempWatch.remaining())
        start = time.monotonic()
        for i, task in enumerate(self.tasks):
            try:
                result.rewards.append(self.episode(task, attack.act, self.seed + i))
            except Exception as e:  # the runtime would record a failed episode
                line = traceback.format_exception_only(type(e), e)[-1].strip()
                result.crashes.append(f"{task.task_id}: {line}"[:300])
            if self.count is not None:
                self.count.advance(info=attack.name)
        result.seconds = time.monotonic() - start
        left = [p for p in TempWatch.remaining() if p not in temp_before]
        if left:  # an env dropped without close is removed by its finalizers once collected
            gc.collect()
            left = [p for p in TempWatch.remaining() if p not in temp_before]
        result.leftovers += [f"left {p}" for p in left]
        result.leftovers += [
            f"process {pid} ({name}) still running"
            for pid, name in lingering_children(ignore=self.before_children)
        ]
        return result

    def episode(self, task: Task, policy: Policy, seed: int) -> float:
        with self.suite.make_env(self.service) as env:
            start = env.reset(task, seed)
            probe = Probe(task, start, 0, "", env, self.suite, random.Random(seed), self.options)
            step = None
            for turn in range(self.max_turns):
                probe.turn = turn
                step = env.step(policy(probe))
                if step.done:
                    break
                probe.observation = (
                    step.context[-1]["content"] if step.context is not None else step.observation
                )
            return float(step.reward)  # truncated episodes keep the last step's reward
