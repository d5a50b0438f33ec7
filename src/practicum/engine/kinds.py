"""Engine kinds by name: `engine.kind: X` -> X's options model and its sampler builder.

    register_engine("hf", HFOptions, "practicum.engine.hf:build_sampler")

The options model (a subclass of `EngineOptions`) is what the config validates the `engine:`
section by; the builder, `build_sampler(engine_options, policy, trainable=None) -> Sampler`,
is imported only when a sampler of that kind is built (`practicum.engine.factory`), so reading
a config imports no engine and vLLM's environment is needed only for engine.kind vllm. The
built-in kinds are registered below; a kind from another package is found through the
`practicum.engines` entry-point group, whose entry (named after the kind) is a module that
calls `register_engine` when loaded. Adding an engine never edits a central list.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from practicum.engine.options import EngineOptions, HFOptions, VLLMOptions
from practicum.errors import ConfigError

ENTRY_POINTS = "practicum.engines"


@dataclass(frozen=True)
class EngineKind:
    name: str
    options: type[EngineOptions]
    builder: str | Callable[..., Any]
    """The sampler builder, or "module:function" naming it (imported on first use)."""

    def build_sampler(self) -> Callable[..., Any]:
        if callable(self.builder):
            return self.builder
        module, _, function = self.builder.partition(":")
        return getattr(importlib.import_module(module), function)


ENGINES: dict[str, EngineKind] = {}
"""engine.kind -> its registered options model and builder."""


def register_engine(
    name: str, options: type[EngineOptions], builder: str | Callable[..., Any]
) -> None:
    """Make `engine.kind: <name>` mean this engine (see the module docstring)."""
    ENGINES[name] = EngineKind(name, options, builder)


def find_engine(name: str) -> EngineKind | None:
    """The registered engine kind `name` (loading its entry point on first use), else None."""
    if name not in ENGINES:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINTS, name=name):
            ep.load()
    return ENGINES.get(name)


def engine_kind(name: str) -> EngineKind:
    """The registered engine kind `name`; an unknown one is a ConfigError."""
    found = find_engine(name)
    if found is None:
        raise ConfigError(f"config error at engine.kind: {unknown_engine(name)}")
    return found


def unknown_engine(name: str) -> str:
    return f"unknown engine {name!r} (known: {', '.join(known_engines())})"


def known_engines() -> list[str]:
    """The built-in kinds, then those other packages declare."""
    declared = [ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)]
    return list(dict.fromkeys([*ENGINES, *declared]))


register_engine("hf", HFOptions, "practicum.engine.hf:build_sampler")
register_engine("vllm", VLLMOptions, "practicum.engine.vllm:build_sampler")
