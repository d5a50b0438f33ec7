"""One episode of an outside agent: the environment's task, the agent in the sandbox, the grade.

    ep = AgentEpisode(env, task, group_id, slot, endpoint, cfg.rollout.agent, ...)
    episode = ep.run()          # blocking; ep.env.kill() from another thread stops it

The agent runs under `practicum.envs.sandbox` in the task's work folder (its only writable
folder; the environment's hidden paths unreadable), with the sandbox's limits, no network but
its own loopback: the forwarder (`practicum.agent.forward`) is its first process, listens on
127.0.0.1:PORT and reaches the endpoint's Unix socket, bound in read-only; then it starts the
agent's command. The agent's environment holds only the sandbox's minimal variables plus
OPENAI_BASE_URL, OPENAI_API_KEY (this episode's key), PRACTICUM_MODEL and PRACTICUM_TASK_FILE;
each sandbox has its own pid namespace, so no agent sees another's processes or their
environ. When its first process ends the whole tree goes (the pid namespace dies with it).

The episode ends when the agent exits, when a call is refused or a submit condition holds
(`rollout.agent.submit_pattern` / `submit_file`: the agent is stopped), or at the time limit.
Failures, each with its reason and `rollout.failure_reward`: a refused call, the time limit
(unless `grade_on_timeout`), a kill by the sandbox (memory, CPU), a non-zero exit, a task the
environment could not set up. Otherwise the environment grades what the agent left
(`Env.agent_grade`, or `rollout.agent.grader`). Nothing is dropped: every episode is returned.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from practicum.agent.endpoint import AgentEndpoint
from practicum.agent.live import CallLimits, LiveEpisode
from practicum.envs.base import AgentOutcome, AgentTask, Env, StepResult, Task
from practicum.envs.sandbox import Limits, RunResult, SandboxError, run_command
from practicum.envs.scratch import ScratchDir
from practicum.episode import Episode

if TYPE_CHECKING:
    from practicum.config import AgentConfig

log = logging.getLogger(__name__)

PORT = 8000
"""The forwarder's port on the sandbox's own loopback (each sandbox has its own network)."""
FORWARDER = Path(__file__).with_name("forward.py")
LOG_CHARS = 3000
"""Characters of the agent's output kept with the episode."""


def agent_limits(cfg: AgentConfig) -> CallLimits:
    return CallLimits(
        cfg.max_calls,
        cfg.max_parallel_calls,
        cfg.max_episode_tokens,
        cfg.max_call_tokens,
        cfg.min_reply_tokens,
    )


class _Run:
    """What the runtime kills or closes (its `builder.env`): the sandbox and the environment."""

    def __init__(self, env: Env):
        self.inner = env
        self.cancel = threading.Event()
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        self.cancel.set()
        self.inner.kill()

    def close(self) -> None:
        self.inner.close()


class AgentEpisode:
    """One outside agent's episode (module doc)."""

    def __init__(
        self,
        env: Env,
        task: Task,
        group_id: str,
        slot: int,
        endpoint: AgentEndpoint,
        cfg: AgentConfig,
        seed: int,
        failure_reward: float,
        temperature: float | None = None,
    ):
        self.env = _Run(env)
        self.task, self.group_id, self.slot = task, group_id, slot
        self.endpoint, self.cfg, self.seed = endpoint, cfg, seed
        self.failure_reward = failure_reward
        self.temperature = temperature if cfg.sampling == "run" else None
        self.done = False

    def run(self, generate: Callable | None = None) -> Episode:
        """Run the episode to its end (module doc); `generate` is unused (the agent's calls
        reach the engine through the endpoint)."""
        t0 = time.perf_counter()
        live = None
        try:
            try:
                setup = self.env.inner.agent_task(self.task, self.seed)
            except Exception as e:  # a broken task costs one episode, never the run
                return self._episode(
                    None,
                    f"agent task set-up failed: {type(e).__name__}: {e}",
                    info={"traceback": traceback.format_exc(limit=3)},
                )
            live = self.endpoint.open(
                agent_limits(self.cfg), self.seed, self.temperature, self.cfg.submit_pattern
            )
            scratch = ScratchDir(self, "practicum-agent-")
            try:
                result = self._sandboxed(setup, live, scratch.path)
            except SandboxError as e:
                return self._episode(live, f"sandbox: {e}")
            finally:
                self.endpoint.close(live)
                scratch.remove()
            return self._graded(setup, live, result, time.perf_counter() - t0)
        finally:
            self.done = True
            self.env.close()

    # -- the sandboxed run ----------------------------------------------------------------------
    def _sandboxed(self, setup: AgentTask, live: LiveEpisode, scratch: Path) -> RunResult:
        cfg = self.cfg
        scratch.chmod(0o755)  # the sandbox's uid reads the task file through it
        task_file = scratch / "task.md"
        task_file.write_text(setup.prompt)
        task_file.chmod(0o644)
        argv, shown = self._command(setup.prompt, task_file)
        env = {
            "OPENAI_BASE_URL": f"http://127.0.0.1:{PORT}/v1",
            "OPENAI_API_KEY": live.key,
            "PRACTICUM_MODEL": self.endpoint.name,
            "PRACTICUM_TASK_FILE": str(task_file),
            "NO_PROXY": "127.0.0.1,localhost",
            **cfg.env,
        }
        wall = min(cfg.time_limit_s, setup.wall_seconds or cfg.time_limit_s)
        limits = Limits(
            wall_seconds=wall,
            memory_mb=cfg.memory_mb,
            max_processes=cfg.max_processes,
            output_bytes=2 * LOG_CHARS,
        )
        forward = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            FORWARDER.read_text(),
            str(self.endpoint.socket),
            str(PORT),
            "--",
            *argv,
        ]
        watch_done = threading.Event()
        watcher = threading.Thread(
            target=self._watch,
            args=(live, setup.workdir, watch_done),
            name="agent-watch",
            daemon=True,
        )
        watcher.start()
        try:
            return run_command(
                forward,
                setup.workdir,
                limits,
                hidden_paths=setup.hidden,
                env=env,
                stdin=setup.prompt if cfg.task_input == "stdin" else None,
                backend=cfg.backend,
                cancel=self.env.cancel,
                read_only=[self.endpoint.socket.parent, scratch, *shown],
            )
        finally:
            watch_done.set()
            watcher.join()

    def _watch(self, live: LiveEpisode, workdir: Path, done: threading.Event) -> None:
        """Stop the agent once its episode has ended (a refusal, a submit condition)."""
        while not done.wait(0.2):
            submitted = self.cfg.submit_file is not None and os.path.lexists(
                workdir / self.cfg.submit_file
            )
            if submitted:
                live.submitted = True
            if submitted or live.ended.is_set():
                self.env.cancel.set()
                return

    def _command(self, prompt: str, task_file: Path) -> tuple[list[str], list[Path]]:
        """(argv, host paths to show read-only): placeholders filled, existing paths made
        absolute and shown (a venv's program: the whole venv)."""
        cfg = self.cfg
        values = {
            "{python}": sys.executable,
            "{task}": prompt,
            "{task_file}": str(task_file),
            "{model}": self.endpoint.name,
            "{base_url}": f"http://127.0.0.1:{PORT}/v1",
        }
        argv, shown = [], [Path(m).absolute() for m in cfg.mounts]
        for arg in cfg.command:
            filled = sys.executable if arg == "python" else arg
            for mark, value in values.items():
                filled = filled.replace(mark, value)
            if filled == arg and not arg.startswith("-") and os.path.exists(arg):
                path = Path(arg).absolute()
                filled, venv = str(path), path.parent.parent
                shown.append(venv if (venv / "pyvenv.cfg").is_file() else path)
            argv.append(filled)
        if cfg.task_input == "argv" and not any("{task}" in a for a in cfg.command):
            argv.append(prompt)
        if shutil.which(argv[0]) is None:
            raise SandboxError(f"rollout.agent.command: {argv[0]!r} is not a program here")
        return argv, shown

    # -- the outcome ----------------------------------------------------------------------------
    def _graded(
        self, setup: AgentTask, live: LiveEpisode, result: RunResult, seconds: float
    ) -> Episode:
        tail = (result.stdout + result.stderr)[-LOG_CHARS:]
        info: dict[str, Any] = {"log": tail, "exit_code": result.returncode, "seconds": seconds}
        failure = live.failure
        stopped = result.killed_reason == "cancelled"
        if failure is None and self.env.killed:
            failure = "stopped: the runtime shut down"
        elif failure is None and result.timed_out and not self.cfg.grade_on_timeout:
            failure = f"time limit: the agent ran past {result.duration:.0f} s"
        elif failure is None and result.killed_reason not in (None, "cancelled", "timeout"):
            failure = f"killed by the sandbox ({result.killed_reason})"
        elif (
            failure is None
            and not stopped
            and not result.timed_out
            and result.returncode not in (0, None)
        ):
            last = (result.stderr.strip().splitlines() or [""])[-1][:300]
            failure = f"the agent exited with code {result.returncode}: {last}"
        if failure is not None:
            return self._episode(live, failure, info=info)
        replies = [t.action_text for th in live.calls.threads if th.adapter for t in th.turns]
        outcome = AgentOutcome(
            setup.workdir,
            live.last_reply,
            None if stopped or result.timed_out else result.returncode,
            tail,
            replies,
        )
        try:
            graded = self._grade(outcome)
        except Exception as e:
            return self._episode(
                live,
                f"grading failed: {type(e).__name__}: {e}",
                info={**info, "traceback": traceback.format_exc(limit=3)},
            )
        info.update(graded.info)
        reward, metrics = graded.reward, dict(graded.metrics)
        if self.cfg.format_pattern is not None:
            share = _format_share(live, re.compile(self.cfg.format_pattern), self.cfg.format_weight)
            reward += self.cfg.format_weight * share
            metrics["agent_format_share"] = share
        return self._episode(live, graded.failure, reward, graded.solved, metrics, info)

    def _grade(self, outcome: AgentOutcome) -> StepResult:
        if self.cfg.grader is None:
            return self.env.inner.agent_grade(outcome)
        module, _, name = self.cfg.grader.partition(":")
        result = getattr(importlib.import_module(module), name)(self.task, outcome)
        return (
            result
            if isinstance(result, StepResult)
            else StepResult(reward=float(result), done=True)
        )

    def _episode(
        self,
        live: LiveEpisode | None,
        failure: str | None,
        reward: float = 0.0,
        solved: bool | None = None,
        metrics: dict | None = None,
        info: dict | None = None,
    ) -> Episode:
        fields = dict(
            reward=self.failure_reward if failure else float(reward),
            failure=failure,
            solved=False if failure else solved,
            metrics=dict(metrics or {}),
            info={"slot": self.slot, **(info or {})},
        )
        if live is None:
            return Episode(self.task.task_id, self.group_id, [], episode_id=_new_id(), **fields)
        calls = live.calls
        fields["metrics"].update(
            {
                "agent_calls": float(calls.calls),
                "agent_continued": float(calls.continued),
                "agent_kept_history": float(calls.kept),
                "agent_segments": float(calls.segments),
                "agent_cut_calls": float(calls.cut),
                "agent_refused": float(live.refused),
            }
        )
        fields["info"].update(submitted=live.submitted, late_calls=live.late)
        return calls.episode(self.task.task_id, self.group_id, episode_id=live.episode_id, **fields)


def _format_share(live: LiveEpisode, pattern: re.Pattern, weight: float) -> float:
    """The share of the policy's replies that match the agent's action format; each matching
    turn's own reward is `weight` (per-call credit, recorded with the turn)."""
    turns = [t for th in live.calls.threads if th.adapter for t in th.turns]
    hits = [bool(pattern.search(t.action_text)) for t in turns]
    for t, hit in zip(turns, hits):
        t.reward = weight * hit
    return sum(hits) / len(hits) if hits else 0.0


def _new_id() -> str:
    import uuid

    return uuid.uuid4().hex
