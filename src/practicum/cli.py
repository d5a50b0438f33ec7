"""`practicum` command line: train, eval, plot, mle."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from practicum.config import ConfigError, load_config


USER_ERRORS = {"ModelNotFoundError", "CompetitionError", "SandboxError", "ValueError",
               "FileNotFoundError"}
"""Errors caused by input (config, model spec, task files): one clear line, no traceback."""


def _config(args) -> "object":
    return load_config(args.config, args.overrides)


def cmd_train(args) -> int:
    cfg = _config(args)
    from practicum.runtime.session import open_session

    s = open_session(cfg)
    if cfg.runtime.mode == "async":
        from practicum.runtime.async_ import run_async

        summary = run_async(s, progress=not args.quiet)
    else:
        from practicum.runtime.sync import run_sync

        summary = run_sync(s, progress=not args.quiet)
    _print_summary(summary)
    return 0


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"practicum run {summary['run_dir']}")
    table.add_column("held-out")
    table.add_column("reward mean", justify="right")
    table.add_column("success rate", justify="right")
    for label, ev in (("before training", summary.get("eval_before")),
                      ("after training", summary.get("eval_after"))):
        if ev:
            table.add_row(label, f"{ev['reward_mean']:.3f}", f"{ev['success_rate']:.3f}")
    Console().print(table)
    print(f"steps {summary['steps']}, episodes {summary['episodes']}, "
          f"{summary['wall_seconds']:.0f} s; plot: {summary['plot']}")


def cmd_eval(args) -> int:
    cfg = _config(args)
    from practicum.runtime.session import open_session

    s = open_session(cfg)  # resumes the run folder's latest checkpoint when there is one
    if args.checkpoint:
        s.learner.load(Path(args.checkpoint))
    result = s.evaluate(args.label or f"eval_step_{s.learner.step:06d}")
    print(json.dumps(result, indent=1))
    return 0


def cmd_plot(args) -> int:
    from practicum.report import plot_rewards

    print(plot_rewards(Path(args.run_dir)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="practicum", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp):
        sp.add_argument("config", nargs="?", help="YAML config file (default: built-in defaults)")
        sp.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-4")

    t = sub.add_parser("train", help="train a policy with RL")
    with_config(t)
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="evaluate on held-out tasks")
    with_config(e)
    e.add_argument("--checkpoint", help="checkpoint folder (default: the run's latest)")
    e.add_argument("--label", help="name of the eval JSON written under RUN/eval/")
    e.set_defaults(func=cmd_eval)

    pl = sub.add_parser("plot", help="plot reward vs step of a run folder")
    pl.add_argument("run_dir")
    pl.set_defaults(func=cmd_plot)

    try:
        from practicum.envs.mle.commands import add_mle_commands
    except ImportError:
        add_mle_commands = None
    if add_mle_commands is not None:
        m = sub.add_parser("mle", help="ML-engineering competitions")
        add_mle_commands(m.add_subparsers(dest="mle_command", required=True))
    return p


def _split_config_arg(args) -> None:
    """`practicum train a=b` has no file: treat a first positional containing '=' as override."""
    if getattr(args, "config", None) and "=" in args.config and not Path(args.config).exists():
        args.overrides = [args.config, *args.overrides]
        args.config = None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _split_config_arg(args)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"practicum: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        if type(e).__name__ not in USER_ERRORS:
            raise
        print(f"practicum: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("practicum: interrupted; run again with the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
