"""The `mle` task suite: competitions split into training and held-out sets, and the env factory.

`mle_suite(options, ctx)` builds it from `task.options` (every key optional; `MleOptions`
documents each one and its default). The held-out competitions are a fixed, named subset
(default: three of the eleven bundled ones, one per kind of task); training uses the rest,
minus `exclude`.

    task:
      name: mle
      options: {mode: template, instrumenter: rules, held_out: [iris-species, ...],
                exclude: [health-insurance-visits], eval_repeats: 8, wall_seconds: 30}

This module stays cheap to import (the package registers it on import): the competitions,
sandbox and model machinery load when a suite is built.
"""

from __future__ import annotations

from pathlib import Path

from practicum.envs.base import Task
from practicum.envs.mle.options import DEFAULT_HELD_OUT, MleOptions, check_instrumenter
from practicum.envs.registry import Suite, SuiteContext
from practicum.errors import ConfigError

__all__ = [
    "DEFAULT_HELD_OUT",
    "MleOptions",
    "check_instrumenter",
    "mle_suite",
    "split_competitions",
]


def split_competitions(known: list[str], opts: MleOptions) -> tuple[list[str], list[str]]:
    """(train ids, held-out ids); every named id must exist and the two sets must not meet."""

    def check(ids: list[str], key: str) -> None:
        unknown = [c for c in ids if c not in known]
        if unknown:
            raise ConfigError(
                f"config error at task.options.{key}: unknown competition(s) "
                f"{unknown} (known: {', '.join(known)})"
            )

    check(opts.held_out, "held_out")
    check(opts.exclude, "exclude")
    if opts.train is not None:
        check(opts.train, "train")
    held = list(dict.fromkeys(opts.held_out))
    pool = opts.train if opts.train is not None else known
    train = [c for c in dict.fromkeys(pool) if c not in held and c not in opts.exclude]
    overlap = sorted(set(opts.train or []) & set(held))
    if overlap:
        raise ConfigError(f"config error at task.options.train: {overlap} are also held out")
    if not train:
        raise ConfigError("config error at task.options: no training competitions left")
    if not held:
        raise ConfigError("config error at task.options.held_out: name at least one competition")
    return train, held


def mle_suite(options: MleOptions, ctx: SuiteContext) -> Suite:
    """ML-engineering competitions (MLE-bench style): write code, run it sandboxed, graded."""
    from practicum.envs.mle.actions.self_improve import SolutionBuffer
    from practicum.envs.mle.competitions.loading import discover
    from practicum.envs.mle.env import MleEnvFactory
    from practicum.envs.mle.episode_data import CompetitionCache
    from practicum.envs.mle.run_cache import RunCache

    check_instrumenter(options.instrumenter)
    folders = discover([Path(d) for d in options.competitions_dirs])
    train_ids, held_ids = split_competitions(sorted(folders), options)
    cache = CompetitionCache(folders, Path(options.data_root) if options.data_root else None)
    for cid in train_ids + held_ids:  # prepare now: a broken competition fails the start
        data = cache[cid]
        if (
            options.mode != "script"
            and (data.template if options.mode == "template" else data.section) is None
        ):
            raise ConfigError(
                f"config error at task.options.mode: competition '{cid}' has no "
                f"{options.mode} script (set target_columns in its config.yaml, "
                f"or use mode: script)"
            )
    buffer = SolutionBuffer(k=options.buffer_size)
    runs = RunCache() if options.reuse_runs else None
    factory = MleEnvFactory(options, cache, buffer, ctx.failure_reward, runs)
    train = [
        Task(cid, {"competition": cid, "split": "train"})
        for _ in range(options.train_repeats)
        for cid in train_ids
    ]
    held_out = [
        Task(
            f"{cid}#{k}" if options.eval_repeats > 1 else cid, {"competition": cid, "split": "eval"}
        )
        for cid in held_ids
        for k in range(options.eval_repeats)
    ]
    return Suite(factory, train, held_out, state=buffer.state, load_state=buffer.load_state)
