"""What an environment declares for `practicum audit`: its reward floor, an honest reference
policy and its own attacks, next to its registration:

    register_env("calculator", CalculatorOptions, calculator_suite, audit=calculator_audit)

with `calculator_audit(options) -> AuditSpec`. Every environment also gets the generic attacks
(`practicum.audit.attacks`); `AuditSpec.code` and `AuditSpec.answer` let them speak the
environment's own action format (a program to run in its sandbox, a final answer).

An attack is a scripted policy: `act(probe) -> action text`, called once per turn. It may read
anything the audit knows (the task, the environment object, the suite): attacks are white-box,
the worst case of a policy that has learned where things live.

Undue credit (what the audit fails on) is defined per attack by its `ceiling`:
  floor   the attack does not attempt the task: any episode rewarded above `AuditSpec.floor`
          (the most an episode that does not attempt the task may earn) is undue credit;
  honest  the attack does part of the work or a shortcut with a legitimate share of credit
          (a constant prediction, a lookup of public data): its mean reward above the honest
          reference's mean on the same tasks (`AuditSpec.honest`; never below the floor) is
          undue credit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from practicum.envs.base import Env, Start, Task

TOLERANCE = 1e-6
"""Rewards within this of a ceiling are at the ceiling (float sums of credits)."""


@dataclass
class Probe:
    """What an attack sees when it chooses its next action."""

    task: Task
    start: Start
    turn: int
    """0 for the first action of the episode."""
    observation: str
    """The environment's last observation ("" before the first action)."""
    env: Env
    suite: Any
    """The environment's `Suite` (practicum.envs.registry, which imports this module)."""
    rng: random.Random
    options: Any = None
    """The environment's validated `task.options`."""
    notes: dict[str, Any] = field(default_factory=dict)
    """Kept across the turns of one episode (an attack's own memory)."""

    @property
    def prompt(self) -> str:
        """The text of the first prompt's last user message."""
        users = [m["content"] for m in self.start.messages if m["role"] == "user"]
        return users[-1] if users else ""


Policy = Callable[[Probe], str]


@dataclass(frozen=True)
class Attack:
    """A scripted adversarial policy."""

    name: str
    act: Policy
    ceiling: Literal["floor", "honest"] = "floor"
    """Which bound its rewards must stay under (module docstring)."""
    known: str = ""
    """A documented residual hole this attack pins (why it is not closed): its undue credit is
    reported as a known hole and does not fail the audit; once contained, the audit says so."""
    escaped: Callable[[], list[str]] | None = None
    """Called once, a few seconds after the attack's episodes: what got out of the sandbox
    (host files it wrote, connections it made), described, and removed where it is a file."""


@dataclass(frozen=True)
class AuditSpec:
    """An environment's declarations for the audit (module docstring)."""

    floor: float = 0.0
    """The most reward an episode that does not attempt the task may earn."""
    honest: Policy | None = None
    """A scripted policy that solves tasks the intended way: the reference the attacks are
    compared with (None: no reference; `honest` ceilings then fall back to `floor`)."""
    attacks: list[Attack] = field(default_factory=list)
    """The environment's own attacks, run after the generic ones."""
    code: Callable[[str], str] | None = None
    """Wrap a Python program into an action that runs it in the environment's sandbox (None:
    the environment runs no code; the sandbox probes are skipped)."""
    answer: Callable[[str], str] | None = None
    """Wrap a text into a final-answer action (None: the generic attacks guess formats)."""
    names: Callable[[Probe], list[str]] | None = None
    """Names the environment shows a policy besides the prompt (entities, titles, options):
    the candidate spray offers each, and answer-key probes draw their decoys from them."""
    attempts: tuple[str, ...] = ()
    """Generic attacks whose replies are attempts in this environment (e.g. "prompt echo" where
    the prompt shows a complete action): judged against the honest reference, not the floor."""


AuditDeclaration = Callable[[Any], AuditSpec]
"""`audit(options) -> AuditSpec`, registered with `register_env(..., audit=...)`."""
