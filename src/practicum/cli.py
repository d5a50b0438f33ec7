"""`practicum` command line: train, sft, rft, eval, plot, show, envs, audit, serve, and the
commands environments add (mle, swe, ...: `practicum.envs.registry.register_command`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from practicum.config import load_config
from practicum.errors import PracticumError
from practicum.terminate import Terminated, unwind_on_sigterm


def _config(args):
    return load_config(args.config, args.overrides)


def cmd_train(args) -> int:
    from practicum.runtime.placement import serve_learner_rank
    from practicum.runtime.train import run_training

    cfg = _config(args)
    if serve_learner_rank(cfg):  # torchrun rank > 0: it ran the learner's calls, nothing else
        return 0
    if cfg.stages:
        from practicum.stages import run_stages

        print(run_stages(cfg, progress=not args.quiet)["table"])
        return 0
    _print_summary(run_training(cfg, progress=not args.quiet))
    return 0


def cmd_rft(args) -> int:
    from practicum.runtime.placement import serve_learner_rank
    from practicum.runtime.rft import rft_config, run_rft

    cfg = _config(args)
    if serve_learner_rank(rft_config(cfg)):  # torchrun rank > 0: the stage's learner calls
        return 0
    summary = run_rft(cfg, progress=not args.quiet)
    print(json.dumps(summary, indent=1))
    return 0


def cmd_sft(args) -> int:
    from practicum.finetune import stage_config
    from practicum.runtime.placement import serve_learner_rank
    from practicum.runtime.sft import run_sft

    cfg = _config(args)
    if serve_learner_rank(stage_config(cfg, "sft", cfg.sft)):  # torchrun rank > 0
        return 0
    summary = run_sft(cfg, progress=not args.quiet)
    print(json.dumps(summary, indent=1))
    return 0


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"practicum run {summary['run_dir']}")
    table.add_column("held-out")
    table.add_column("reward mean", justify="right")
    table.add_column("solved rate", justify="right")
    for label, ev in (
        ("before training", summary.get("eval_before")),
        ("after training", summary.get("eval_after")),
    ):
        if ev:
            table.add_row(label, f"{ev['reward_mean']:.3f}", f"{ev['solved_rate']:.3f}")
    Console().print(table)
    skipped = summary.get("skipped_batches", 0)
    note = (
        f" ({skipped} batch{'es' if skipped > 1 else ''} had nothing to train on)"
        if skipped
        else ""
    )
    print(
        f"steps {summary['steps']}, episodes {summary['episodes']}{note}, "
        f"{summary['wall_seconds']:.0f} s; plot: {summary['plot']}"
    )


def cmd_eval(args) -> int:
    from practicum.runtime.session import open_session

    s = open_session(_config(args))  # resumes the run folder's latest checkpoint when there is one
    try:
        if args.checkpoint:
            s.learner.load(Path(args.checkpoint))
            s.publish()
        from practicum.runtime.progress import counting

        with counting("evaluating", len(s.eval_tasks), log_dir=s.run_dir) as count:
            result = s.evaluate(
                args.label or f"eval_step_{s.learner.step:06d}", lambda episode: count.advance()
            )
    finally:
        s.close()
    print(json.dumps(result, indent=1))
    return 0


def cmd_plot(args) -> int:
    from practicum.report import plot_rewards

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise PracticumError(f"run folder {run_dir} does not exist")
    if not (run_dir / "metrics.jsonl").is_file():
        raise PracticumError(f"{run_dir} is not a run folder (no metrics.jsonl)")
    print(plot_rewards(run_dir))
    return 0


def cmd_envs(args) -> int:
    from practicum.envs.registry import env_entry, known_envs

    for name in known_envs():
        entry = env_entry(name)
        print(f"{name:14s} {entry.doc.splitlines()[0] if entry.doc else ''}")
        if args.options:
            for key, field in entry.options.model_fields.items():
                default = (
                    "(required)"
                    if field.is_required()
                    else repr(field.get_default(call_default_factory=True))
                )
                print(f"    {key} = {default}: {field.description or ''}")
    return 0


def cmd_audit(args) -> int:
    """`practicum audit CONFIG|ENV`: exit 1 on any undue credit, crash or leftover."""
    from rich.console import Console

    from practicum.audit.report import audit_table, write_json
    from practicum.audit.run import OK_VERDICTS, run_audit
    from practicum.envs.registry import SuiteContext

    target = args.target
    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        cfg = load_config(target, args.overrides)
    else:
        cfg = load_config(None, [f"task.name={target}", *args.overrides])
    if cfg.rollout.agent is not None:  # the agent's command replaced by each attack's
        from practicum.audit.agents import run_agent_audit

        report = run_agent_audit(cfg, tasks=args.tasks, only=args.attack)
    else:
        ctx = SuiteContext(cfg.run.seed, cfg.rollout.failure_reward, None, cfg.rollout.max_turns)
        report = run_audit(
            cfg.task.name,
            cfg.task.options,
            tasks=args.tasks,
            ctx=ctx,
            max_turns=cfg.rollout.max_turns,
            only=args.attack,
            progress=True,
        )
    Console(width=160).print(audit_table(report))
    if args.json:
        write_json([report], Path(args.json))
    if not report.ok:
        bad = [r.attack for r in report.results if r.verdict not in OK_VERDICTS]
        print(f"practicum: audit of {cfg.task.name} failed: {', '.join(bad)}", file=sys.stderr)
    return 0 if report.ok else 1


def cmd_show(args) -> int:
    from practicum.show import show

    show(args.run_dir, args.episode)
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
    t.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar or lines (RUN/progress.log still gets them)",
    )
    t.set_defaults(func=cmd_train)

    r = sub.add_parser(
        "rft",
        help="rejection fine-tuning: sample, keep solved episodes, SFT; "
        "then train RL from it with model.init=RUN/rft/policy",
    )
    with_config(r)
    r.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar or lines (RUN/progress.log still gets them)",
    )
    r.set_defaults(func=cmd_rft)

    sf = sub.add_parser(
        "sft",
        help="warm start: SFT on solved episodes of training tasks "
        "acted by the env's demonstrator (sft.source=demo) or a teacher model "
        "(sft.source=teacher, sft.teacher=openai:<url>|<model>)",
    )
    with_config(sf)
    sf.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sf.set_defaults(func=cmd_sft)

    e = sub.add_parser("eval", help="evaluate on held-out tasks")
    with_config(e)
    e.add_argument("--checkpoint", help="checkpoint folder (default: the run's latest)")
    e.add_argument("--label", help="name of the eval JSON written under RUN/eval/")
    e.set_defaults(func=cmd_eval)

    pl = sub.add_parser("plot", help="plot reward vs step of a run folder")
    pl.add_argument("run_dir")
    pl.set_defaults(func=cmd_plot)

    en = sub.add_parser("envs", help="list the registered environments")
    en.add_argument("--options", action="store_true", help="also list each one's task.options")
    en.set_defaults(func=cmd_envs)

    au = sub.add_parser(
        "audit",
        help="run scripted adversarial policies against an "
        "environment's rewards; exit 1 on undue credit or leftovers",
    )
    au.add_argument("target", metavar="CONFIG|ENV", help="a YAML config or an environment name")
    au.add_argument("overrides", nargs="*", help="dotted overrides, e.g. task.options.x=1")
    au.add_argument("--tasks", type=_positive, default=3, help="tasks each attack is run on")
    au.add_argument("--json", help="also write the results to this JSON file")
    au.add_argument(
        "--attack", action="append", help="only attacks whose name contains this (repeatable)"
    )
    au.set_defaults(func=cmd_audit)

    sh = sub.add_parser(
        "show",
        help="print a stored episode (roles, tool calls, reward) and save it as HTML in RUN/show/",
    )
    sh.add_argument("run_dir")
    sh.add_argument("--episode", type=int, help="index in RUN/episodes.jsonl (default: last)")
    sh.set_defaults(func=cmd_show)

    from practicum.envs.registry import CommandHost, env_commands

    host = CommandHost(open_session=_open_session)
    for command in env_commands():
        command.add_arguments(sub.add_parser(command.name, help=command.summary), host)

    from practicum.serve.cli import add_serve_command

    add_serve_command(sub)
    return p


def _open_session(cfg):
    """A runtime session of `cfg`'s run, for an environment's command (`CommandHost`)."""
    from practicum.runtime.session import open_session

    return open_session(cfg)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def _split_config_arg(args) -> None:
    """`practicum train a=b` has no file: treat a first positional containing '=' as override."""
    if getattr(args, "config", None) and "=" in args.config and not Path(args.config).exists():
        args.overrides = [args.config, *args.overrides]
        args.config = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; `key=value` overrides may come before or after the flags
    (`practicum audit ENV --tasks 4 run.seed=1`), in the order given. argparse alone ends the
    positional list at the first flag (and `parse_intermixed_args` refuses subcommands), so
    what it leaves over is appended to the command's overrides when every piece is one."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "overrides") or any(x.startswith("-") or "=" not in x for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _split_config_arg(args)
    if not sys.stderr.isatty():  # a log file: no carriage-return bars (weight loading)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    unwind_on_sigterm()  # `serve` installs its own handler
    try:
        return args.func(args)
    except Terminated:
        print("practicum: terminated; run again with the same command to resume", file=sys.stderr)
        return 143
    except PracticumError as e:  # the user's input: one clear line; bugs keep tracebacks
        print(f"practicum: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("practicum: interrupted; run again with the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `practicum envs | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
