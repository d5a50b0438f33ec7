"""The `swe` environment: a multi-turn agent fixes an issue in a real repository
(arXiv 2508.03501's setting at small scale).

One task = one `SweInstance`. reset() materializes the base (buggy) state into a fresh temp
folder and makes its one-commit history inside the sandbox (`workspace.Workspace`); each turn
the policy calls one tool (`tools`), sandboxed, and sees its output head/tail-truncated. The
episode ends on <submit> or on the last turn (`max_turns`, default the run's
rollout.max_turns): the workspace's diff, computed inside the sandbox, is graded with
SWE-bench's FULL rule on a pristine copy (`grading.grade`). Reward: 1 if resolved, else 0, as
in the paper; its linear penalty past a step budget is applied by the learner
(algo.step_budget / algo.step_penalty, `practicum.algo.shaping.step_penalty`), not here.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from practicum.envs.base import AgentOutcome, AgentTask, Env, Start, StepResult, Task
from practicum.envs.registry import Suite, SuiteContext, register_env
from practicum.envs.swe.audit import swe_audit
from practicum.envs.swe.demo import Demonstrator
from practicum.envs.swe.grammar import GrammarCaps, tool_grammar
from practicum.envs.swe.instance import SweInstance, load_instances
from practicum.envs.swe.prompts import first_messages
from practicum.envs.swe.tools import STOP_STRINGS, parse_action, swe_tools, truncate
from practicum.envs.swe.workspace import Workspace
from practicum.errors import ConfigError
from practicum.tools import CallError, ToolSet

log = logging.getLogger(__name__)


class SweOptions(BaseModel):
    """`task.options` of the swe environment."""

    model_config = ConfigDict(extra="forbid")

    instances: str | None = Field(
        None,
        description="SWE-bench-format JSONL of task instances (None = the bundled suite, "
        "practicum.tasks.swe).",
    )
    held_out_packages: list[str] = Field(
        ["parse"],
        description="Packages (instance `repo`, or its last path part) whose tasks "
        "are held out for evaluation and never trained on.",
    )
    tiers: list[int] | None = Field(
        [1],
        description="Difficulty tiers to use (1 = the issue names the function and shows "
        "the failing assertion); None = all.",
    )
    train_size: int | None = Field(
        None, ge=1, description="Training tasks kept (None = all), taken round-robin over packages."
    )
    eval_size: int | None = Field(
        None, ge=1, description="Held-out tasks kept (None = all), taken round-robin over packages."
    )
    max_turns: int | None = Field(
        None,
        ge=1,
        description="Turn at which the diff is graded even without <submit> "
        "(None = the run's rollout.max_turns).",
    )
    few_shot: bool = Field(True, description="Show one worked episode as chat turns first.")
    issue_chars: int = Field(1500, gt=0, description="The issue text is cut to this length.")
    obs_chars: int = Field(
        1200,
        gt=100,
        description="Each observation is cut to this many characters (head and tail kept).",
    )
    episode_obs_chars: int = Field(
        4000,
        gt=100,
        description="Characters of observations per episode; once spent, later "
        "observations shrink to what is left (at least 200) so episodes stay within "
        "rollout.max_seq_len.",
    )
    view_lines: int = Field(40, ge=1, description="Lines <view> shows without a range.")
    command_seconds: float = Field(20.0, gt=0, description="Wall-clock limit of one tool call.")
    memory_mb: int = Field(1024, gt=0, description="Memory limit of one tool call.")
    backend: str = Field("auto", description="Sandbox backend: auto, bwrap or namespaces.")
    hidden_paths: list[str] = Field(
        [],
        description="More host paths made unreadable to the agent (the instance file's "
        "folder and every source archive always are).",
    )
    tool_grammar: bool = Field(
        True,
        description="Every turn carries the tool-call grammar "
        "(`swe.grammar`) for samplers that honour `grammar`: one call, "
        "its free-text parts length-capped.",
    )
    grammar_path_chars: int = Field(
        80,
        ge=8,
        description="Grammar cap on a path (or each part of a pytest node id), in characters.",
    )
    grammar_search_chars: int = Field(
        60, ge=4, description="Grammar cap on a search string, in characters."
    )
    grammar_command_chars: int = Field(
        200, ge=8, description="Grammar cap on a shell command, in characters."
    )
    grammar_edit_tokens: int = Field(
        80,
        ge=4,
        description="Grammar cap on each of an "
        "edit's <old> and <new> blocks, in tokens (with the path's "
        "24 and the tags, an edit stays under 200 tokens).",
    )


class SweEnv(Env):
    """SWE-agent-style episodes on one repository task (see the module docstring)."""

    stop_strings = STOP_STRINGS

    def __init__(
        self,
        instances: dict[str, SweInstance],
        opts: SweOptions | None = None,
        max_turns: int = 8,
        hidden: tuple[Path, ...] = (),
        materialize: Callable | None = None,
        grade: Callable | None = None,
    ):
        self.instances, self.opts = instances, opts or SweOptions()
        self.max_turns = self.opts.max_turns or max_turns
        self.hidden = hidden
        self._materialize, self._grade = materialize, grade
        self._cancel = threading.Event()
        self._ws: Workspace | None = None
        self._tools: ToolSet | None = None
        self._instance: SweInstance | None = None
        self._done = False
        self._turns = self._errors = self._malformed = 0
        self._obs_left = self.opts.episode_obs_chars
        o = self.opts
        self.grammar = (
            tool_grammar(
                GrammarCaps(
                    o.grammar_path_chars,
                    o.grammar_search_chars,
                    o.grammar_command_chars,
                    o.grammar_edit_tokens,
                )
            )
            if o.tool_grammar
            else None
        )

    def reset(self, task: Task, seed: int = 0) -> Start:
        self.close()
        self._instance = self.instances[task.task_id]
        self._done, self._turns, self._errors, self._malformed = False, 0, 0, 0
        self._obs_left = self.opts.episode_obs_chars
        self._ws = Workspace.create(
            self._instance, self.hidden, self.opts.backend, materialize=self._materialize
        )
        self._ws.cancel = self._cancel
        self._tools = swe_tools(
            self._ws, self.opts.command_seconds, self.opts.view_lines, memory_mb=self.opts.memory_mb
        )
        return Start(
            first_messages(self._instance, self.opts.few_shot, self.opts.issue_chars),
            list(self.stop_strings),
            self.grammar,
        )

    def step(self, action: str) -> StepResult:
        assert self._ws is not None and not self._done, "reset() before step(), once per turn"
        self._turns += 1
        last = self._turns >= self.max_turns
        try:
            act = parse_action(action)
        except CallError as err:
            self._malformed += 1
            if last:
                return self._finish(0.0, submitted=False, malformed=True)
            return StepResult(
                str(err),
                malformed=True,
                metrics=self._metrics(),
                info={"tool": None},
                grammar=self.grammar,
            )
        if act.tool == "submit":
            return self._finish(0.0, submitted=True)
        t0 = time.perf_counter()
        result = self._tools.run(act.tool, act.body)
        self._errors += int(result.error)
        if last:
            return self._finish(time.perf_counter() - t0, submitted=False)
        return StepResult(
            self._observe(result.text),
            duration=time.perf_counter() - t0,
            metrics=self._metrics(),
            info={"tool": act.tool, "error": result.error},
            grammar=self.grammar,
        )

    def agent_task(self, task: Task, seed: int = 0) -> AgentTask:
        """An outside agent (`rollout.agent`, e.g. mini-swe-agent) works the issue in a fresh
        workspace: the repository is its folder, the task sources are hidden."""
        self.close()
        self._instance = self.instances[task.task_id]
        self._done, self._turns, self._errors, self._malformed = False, 0, 0, 0
        self._ws = Workspace.create(
            self._instance, self.hidden, self.opts.backend, materialize=self._materialize
        )
        self._ws.cancel = self._cancel
        return AgentTask(self._instance.problem_statement, self._ws.repo, list(self._ws.hidden))

    def agent_grade(self, outcome: AgentOutcome) -> StepResult:
        """The workspace's diff, graded like a submitted episode (FULL rule)."""
        return self._finish(0.0, submitted=outcome.exit_code == 0)

    def _observe(self, text: str) -> str:
        """Truncated to obs_chars, and to what is left of the episode's observation budget."""
        cap = min(self.opts.obs_chars, max(200, self._obs_left))
        out = truncate(text, cap)
        self._obs_left -= len(out)
        return out

    def _finish(self, seconds: float, submitted: bool, malformed: bool = False) -> StepResult:
        """Grade the workspace's diff; the episode ends."""
        self._done = True
        t0 = time.perf_counter()
        patch, note = self._ws.diff()
        verdict, resolved, applied, reason = None, False, 0.0, note
        if patch is not None and patch.strip():
            grade = self._grade
            if grade is None:
                from practicum.envs.swe.grading import grade
            verdict = grade(self._instance, patch)
            resolved = bool(verdict.resolved)
            reason = str(getattr(verdict, "reason", ""))
            applied = float(getattr(verdict, "patch_applied", True))
        elif patch is not None:
            reason = "empty patch: nothing changed"
        metrics = self._metrics()
        metrics.update(
            {
                "resolved": float(resolved),
                "submitted": float(submitted),
                "patch_applied": applied,
                "patch_lines": float(patch.count("\n")) if patch else 0.0,
                "grade_seconds": time.perf_counter() - t0,
            }
        )
        return StepResult(
            reward=1.0 if resolved else 0.0,
            done=True,
            solved=resolved,
            malformed=malformed,
            duration=seconds + time.perf_counter() - t0,
            metrics=metrics,
            info={
                "tool": "submit" if submitted else None,
                "grade": reason,
                "patch": (patch or "")[:4000],
            },
        )

    def _metrics(self) -> dict[str, float]:
        return {
            "turns": float(self._turns),
            "tool_errors": float(self._errors),
            "malformed_turns": float(self._malformed),
        }

    def kill(self) -> None:
        """Cancel the sandboxed command in progress and any later one (runtime shutdown)."""
        self._cancel.set()

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None


def split_instances(
    instances: list[SweInstance], opts: SweOptions
) -> tuple[list[SweInstance], list[SweInstance]]:
    """(train, held-out) by package: a held-out package's tasks are never trained on.
    Tier filter first; sizes are taken round-robin over packages so every one is represented."""
    held = set(opts.held_out_packages)
    pool = [i for i in instances if opts.tiers is None or i.tier in opts.tiers]
    train = [i for i in pool if package(i) not in held]
    evals = [i for i in pool if package(i) in held]
    return _round_robin(train, opts.train_size), _round_robin(evals, opts.eval_size)


def package(instance: SweInstance) -> str:
    """The package a task belongs to: the last path part of its `repo`."""
    return instance.repo.rstrip("/").rsplit("/", 1)[-1]


def _round_robin(items: list[SweInstance], n: int | None) -> list[SweInstance]:
    by_pkg: dict[str, list[SweInstance]] = {}
    for i in sorted(items, key=lambda i: i.instance_id):
        by_pkg.setdefault(package(i), []).append(i)
    out: list[SweInstance] = []
    queues = [by_pkg[k] for k in sorted(by_pkg)]
    while queues and (n is None or len(out) < n):
        queues = [q for q in queues if q]
        for q in queues:
            if n is not None and len(out) >= n:
                break
            out.append(q.pop(0))
    return out


def swe_suite(opts: SweOptions, ctx: SuiteContext) -> Suite:
    """SWE agents fixing bugs in real repositories (arXiv 2508.03501), graded by their tests."""
    if opts.instances is None:
        from practicum.tasks.swe import bundled_instances_path

        path = Path(bundled_instances_path())
    else:
        path = Path(opts.instances)
    if not path.is_file():
        raise ConfigError(f"config error at task.options.instances: {path} is not a file")
    instances = load_instances(path)
    train, held_out = split_instances(instances, opts)
    if not train or not held_out:
        raise ConfigError(
            f"config error at task.options.held_out_packages: the split leaves "
            f"{len(train)} training and {len(held_out)} held-out tasks (packages: "
            f"{sorted({package(i) for i in instances})})"
        )
    hidden = tuple(
        dict.fromkeys(
            [
                path.resolve().parent,
                *(Path(p) for p in opts.hidden_paths),
                *(i.source.resolve() for i in instances),
            ]
        )
    )
    by_id = {i.instance_id: i for i in train + held_out}
    max_turns = getattr(ctx, "max_turns", None) or 8
    make = partial(_make_env, by_id, opts, max_turns, hidden)
    return Suite(
        make,
        [_task(i) for i in train],
        [_task(i) for i in held_out],
        demonstrator=Demonstrator(train),
    )  # gold patches of training tasks only


def _task(i: SweInstance) -> Task:
    return Task(i.instance_id, {"repo": i.repo, "package": package(i), "tier": i.tier})


def _make_env(
    by_id: dict, opts: SweOptions, max_turns: int, hidden: tuple, models: Any = None
) -> SweEnv:
    return SweEnv(by_id, opts, max_turns, hidden)


register_env("swe", SweOptions, swe_suite, audit=swe_audit)
