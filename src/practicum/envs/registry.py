"""Environments register by name with their own typed options and a suite builder.

An environment package declares, at import time,

    register_env("calculator", CalculatorOptions, calculator_suite)

where `CalculatorOptions` is a pydantic model of its `task.options` and
`calculator_suite(options, ctx) -> Suite` builds the env factory and the train/held-out tasks.
`task.name: X` finds the entry by importing `practicum.envs.X` (built-in environments) or the
`practicum.envs` entry-point group (environments in other packages); adding an environment
never edits a central list.

An environment may also add a command, `practicum <name> ...`, from a module of its own:

    register_command("mle", "ML-engineering competitions", add_arguments)

where `add_arguments(parser, host)` fills the command's parser (subcommands included) and sets
each handler with `set_defaults(func=...)` (args -> exit code). The command line finds these
modules without importing any environment, so building its parser stays cheap: the `cli`
module (or package) of each built-in environment package (`practicum.envs.X.cli`), and the
modules of the `practicum.commands` entry-point group (other packages). A command that runs
episodes opens a runtime session through `host` (`CommandHost`): an environment never imports
the runtime.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from practicum.envs.audit import AuditDeclaration
from practicum.envs.base import EnvFactory, Task
from practicum.errors import ConfigError


@dataclass
class Suite:
    """An environment factory plus its training and held-out tasks."""

    make_env: EnvFactory
    train_tasks: list[Task]
    eval_tasks: list[Task]
    state: Callable[[], dict] | None = None
    """State the environments build up while training (e.g. the MLE solution buffer), as a
    JSON-able dict; checkpoints keep it so a resumed run continues with it."""
    load_state: Callable[[dict], None] | None = None
    """Restore what `state` returned."""
    demonstrator: Callable[[str], Callable[[list], str]] | None = None
    """For `practicum sft` (sft.source=demo): task id of a TRAINING task -> an actor writing
    that episode's replies from the chat so far. None: the environment has no demonstrations."""


@dataclass(frozen=True)
class SuiteContext:
    """What a suite builder may know about the run besides its own options."""

    seed: int = 0
    failure_reward: float = 0.0
    """`rollout.failure_reward`: the reward of an episode ended by an environment failure."""
    run_dir: Path | None = None
    max_turns: int | None = None
    """`rollout.max_turns`: an environment that must act on the last turn (grade a diff)."""


@dataclass(frozen=True)
class EnvEntry:
    name: str
    options: type[BaseModel]
    build: Callable[[Any, SuiteContext], Suite]
    """build(options, ctx) -> Suite, with `options` an instance of `self.options`."""
    doc: str = field(default="", compare=False)
    audit: AuditDeclaration | None = field(default=None, compare=False)
    """audit(options) -> AuditSpec: floor, honest reference and own attacks for `practicum
    audit` (practicum.envs.audit); None: the generic attacks only."""


_REGISTRY: dict[str, EnvEntry] = {}


def register_env(
    name: str,
    options: type[BaseModel],
    build: Callable[[Any, SuiteContext], Suite],
    audit: AuditDeclaration | None = None,
) -> None:
    """Make `task.name: <name>` mean this environment (see the module docstring); `audit`
    declares what `practicum audit` checks its rewards against (practicum.envs.audit)."""
    _REGISTRY[name] = EnvEntry(name, options, build, (build.__doc__ or "").strip(), audit)


def env_entry(name: str) -> EnvEntry:
    """The registered environment `name`, importing its module on first use."""
    if name not in _REGISTRY:
        _import_provider(name)
    if name not in _REGISTRY:
        raise ConfigError(
            f"config error at task.name: unknown environment {name!r} "
            f"(known: {', '.join(known_envs())})"
        )
    return _REGISTRY[name]


def known_envs() -> list[str]:
    """Every environment name that can be registered: built-in modules and entry points."""
    import practicum.envs as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_") and info.name not in _REGISTRY:
            _import_provider(info.name)
    for ep in _entry_points():
        if ep.name not in _REGISTRY:
            ep.load()
    return sorted(_REGISTRY)


def parse_options(name: str, options: dict[str, Any] | None) -> BaseModel:
    """`task.options` validated by the environment's options model; errors name the key path."""
    entry = env_entry(name)
    try:
        return entry.options.model_validate(options or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        where = f"task.options.{where}" if where else "task.options"
        msg = f"unknown {name} option" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(f"config error at {where}: {msg} (got {first.get('input')!r})") from None


def build_suite(name: str, options: dict[str, Any] | None, ctx: SuiteContext) -> Suite:
    """The suite of environment `name` with validated options."""
    return env_entry(name).build(parse_options(name, options), ctx)


def _entry_points():
    return importlib.metadata.entry_points(group="practicum.envs")


def _import_provider(name: str) -> None:
    """Import the module that registers `name`: practicum.envs.<name>, else an entry point."""
    if name.isidentifier() and importlib.util.find_spec(f"practicum.envs.{name}") is not None:
        importlib.import_module(f"practicum.envs.{name}")
        return
    for ep in _entry_points():
        if ep.name == name:
            ep.load()
            return


@dataclass(frozen=True)
class CommandHost:
    """What the `practicum` command line lends an environment's commands."""

    open_session: Callable[[Any], Any]
    """open_session(cfg) -> a runtime session of the run (`practicum.runtime.session`): its
    `rollout`, `suite`, `learner`, `server`, `run_dir` and `close`; the run's latest checkpoint
    loaded, if any."""


@dataclass(frozen=True)
class EnvCommand:
    name: str
    summary: str
    """The line `practicum --help` shows."""
    add_arguments: Callable[[argparse.ArgumentParser, CommandHost], None]
    """add_arguments(parser, host): fills `practicum <name>`'s parser; every (sub)command sets
    `func` (args -> exit code)."""


_COMMANDS: dict[str, EnvCommand] = {}

COMMAND_ENTRY_POINTS = "practicum.commands"


def register_command(
    name: str, summary: str, add_arguments: Callable[[argparse.ArgumentParser, CommandHost], None]
) -> None:
    """Make `practicum <name> ...` an environment's command (see the module docstring)."""
    _COMMANDS[name] = EnvCommand(name, summary, add_arguments)


def env_commands() -> list[EnvCommand]:
    """Every environment's command, by name: the built-in environment packages' `cli` modules
    and the `practicum.commands` entry points are imported, not the environments' suites (a
    package's `__init__` runs first, so it stays cheap; handlers import the heavy parts)."""
    import practicum.envs as pkg

    for root in map(Path, pkg.__path__):
        for info in pkgutil.iter_modules([str(root)]):
            folder = root / info.name
            if info.ispkg and ((folder / "cli.py").is_file() or (folder / "cli").is_dir()):
                importlib.import_module(f"practicum.envs.{info.name}.cli")
    for ep in importlib.metadata.entry_points(group=COMMAND_ENTRY_POINTS):
        ep.load()
    return [_COMMANDS[name] for name in sorted(_COMMANDS)]
