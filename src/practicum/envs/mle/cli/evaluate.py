"""Held-out evaluation with self-improvement (arXiv 2509.01684, Sec. 3.3): for every task, one
episode from scratch, then one episode improving that attempt (its code, output and score in
the prompt), and the better of the two is kept.

    practicum mle evaluate configs/mle.yaml [overrides] [--label NAME]

loads the run's latest checkpoint (or the untrained policy when there is none), evaluates the
suite's held-out tasks and writes RUN/eval/<label>.json. The environment decides which
episodes to run and which to keep (`scratch_then_improve`); a runtime session, opened through
the `CommandHost` the main CLI lends, runs them: an environment never imports the loop.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from practicum.envs.base import Task
from practicum.envs.registry import CommandHost
from practicum.errors import ConfigError


class EpisodeLike(Protocol):
    """What this module reads of a finished episode."""

    reward: float
    turns: Sequence[Any]
    """Each turn has `info` (the env's StepResult.info) and `action_text` (the reply)."""


RunEpisodes = Callable[[list[Task], list[str]], Sequence[EpisodeLike]]
"""run_episodes(tasks, episode ids) -> one finished episode per task, in order; an episode's
randomness derives from its id (and the run seed)."""


def previous_solution(episode: EpisodeLike) -> dict[str, Any]:
    """What an improvement prompt shows of an episode: the env's `solution` of its last turn
    (the raw reply when there is none, e.g. the episode failed before running)."""
    turn = episode.turns[-1] if episode.turns else None
    if turn is not None and turn.info.get("solution"):
        return dict(turn.info["solution"])
    reply = turn.action_text.strip()[:500] if turn is not None else ""
    return {"code": reply, "output": "", "score": None, "reward": episode.reward, "valid": False}


def summarise(rewards: list[float], valid: list[bool]) -> dict[str, float]:
    n = max(1, len(rewards))
    return {
        "reward_mean": sum(rewards) / n,
        "valid_rate": sum(valid) / n,
        "episodes": float(len(rewards)),
    }


def _valid(episode: EpisodeLike) -> bool:
    return bool(episode.turns and episode.turns[-1].info.get("valid"))


def scratch_then_improve(run_episodes: RunEpisodes, tasks: list[Task]) -> dict[str, Any]:
    """Scratch episode, then one improvement of it, per task; keep the better (module doc).

    Returns {"scratch", "improve", "best": summaries (reward_mean, valid_rate), "tasks": one
    record per task}. Ties keep the scratch attempt.
    """
    scratch = run_episodes(tasks, [f"eval-scratch/{t.task_id}" for t in tasks])
    improve_tasks = [
        Task(t.task_id, {**t.data, "previous": previous_solution(e)})
        for t, e in zip(tasks, scratch)
    ]
    improved = run_episodes(improve_tasks, [f"eval-improve/{t.task_id}" for t in tasks])
    records, best = [], []
    for task, first, second in zip(tasks, scratch, improved):
        keep = second if second.reward > first.reward else first
        best.append(keep)
        records.append(
            {
                "task_id": task.task_id,
                "scratch_reward": first.reward,
                "improve_reward": second.reward,
                "kept": "improve" if keep is second else "scratch",
                "scratch_valid": _valid(first),
                "improve_valid": _valid(second),
                "scratch_action": first.turns[-1].action_text if first.turns else "",
                "improve_action": second.turns[-1].action_text if second.turns else "",
            }
        )
    return {
        "scratch": summarise([e.reward for e in scratch], [_valid(e) for e in scratch]),
        "improve": summarise([e.reward for e in improved], [_valid(e) for e in improved]),
        "best": summarise([e.reward for e in best], [_valid(e) for e in best]),
        "tasks": records,
    }


def add_evaluate_command(sub: argparse._SubParsersAction, host: CommandHost) -> None:
    """Register `evaluate` on the `mle` subparsers; its episodes run in `host`'s sessions."""
    ev = sub.add_parser(
        "evaluate",
        help="held-out evaluation: scratch, then one improvement, "
        "keep the better (uses the run's latest checkpoint)",
    )
    ev.add_argument("config", help="YAML config of the run (task.name must be mle)")
    ev.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.temperature=0")
    ev.add_argument("--label", default=None, help="name of RUN/eval/<label>.json")
    ev.set_defaults(func=lambda args: evaluate(args, host))


def evaluate(args: argparse.Namespace, host: CommandHost) -> int:
    """`practicum mle evaluate` (module doc): the run's session runs `scratch_then_improve`'s
    episodes on the suite's held-out tasks; the result goes to RUN/eval/<label>.json."""
    from practicum.config import load_config

    cfg = load_config(args.config, args.overrides)
    require_mle(cfg.task.name)
    session = host.open_session(cfg)  # the run's latest checkpoint, if any
    try:

        def run_episodes(tasks, ids):
            return session.rollout(
                [(t, gid, 0) for t, gid in zip(tasks, ids)], cfg.eval.temperature
            )

        result = scratch_then_improve(run_episodes, session.suite.eval_tasks)
        result["policy_version"] = session.server.version
    finally:
        session.close()
    label = args.label or default_label(session.learner.step)
    write_evaluation(result, session.run_dir / "eval" / f"{label}.json")
    return 0


def require_mle(task_name: str) -> None:
    """ConfigError unless the run's task is this environment."""
    if task_name != "mle":
        raise ConfigError(
            f"config error at task.name: mle evaluate needs task.name=mle, got {task_name!r}"
        )


def default_label(step: int) -> str:
    return f"improve_step_{step:06d}"


def write_evaluation(result: dict[str, Any], out: Path) -> None:
    """Write the whole result to `out` (JSON); print the three summaries and where it went."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("scratch", "improve", "best")}, indent=1))
    print(f"written to {out}")
