"""The ML-engineering environment (arXiv 2509.01684): write code, run it sandboxed, get graded.

One episode = one competition and `attempts` actions (default 1). Each action:

    reply --parse--> code          script mode: plan + one ```python block (actions.parsing)
                                   template mode: the region of a fixed script (actions.template)
                                   section mode: the modelling section of a fixed script that
                                   loads the data and writes the submission (actions.section)
          --instrument--> code + milestone prints with a fresh secret nonce (credit.instrument)
          --sandbox--> stdout      a fresh work folder holding ONLY the public files; the private
                                   answers (and the whole data root) are hidden paths
          --judge_run--> RunOutcome: milestones, submission graded without following symlinks,
                         reward failure -10 / +0.1 per milestone / oriented score (credit)
A program that already ran to its end on the same competition is not run again: its copy gets
that run's outcome (`run_cache`, option `reuse_runs`; with the rules instrumenter only).

What a step reports (`StepResult`):
- duration: the sandbox run time (feeds the duration-aware weights);
- malformed: the reply could not be parsed into code (the policy's fault). It is not run; the
  observation says why and the reward is the failure reward (`failure_reward` option);
- failure: only when the sandbox itself failed (not the policy's fault): the episode ends at
  once with the run's `failure_reward` (`SuiteContext`), not the MLE reward;
- solved (when done): some attempt produced a valid submission;
- metrics: the episode so far (`MleEnv.metrics`);
- info: the typed `RunOutcome` as a dict (stdout/stderr cut to tails), the attempt, the prompt
  mode and the `solution` an improvement prompt would show.
With several attempts, each run's summary (markers redacted) is the observation for the next;
the episode's reward is the best attempt's.

Prompt modes (self-improvement, Sec. 3.3): on training tasks, with probability `improve_prob`
the prompt shows a previous valid solution of the same competition from the shared
`SolutionBuffer` (its code, output and score) and asks for an improvement; otherwise "from
scratch". Held-out tasks are always from scratch unless the task names a previous solution
(`mle evaluate` does, for scratch-then-improve evaluation). Template mode starts with few-shot
chat turns and, with `salvage`, accepts a lone `model = ...` line inside a malformed reply;
section mode starts with one few-shot exchange and, with `salvage`, runs the parsing prefix of
a code block cut off by the token budget (`actions.section`).

Task.data: {"competition": id, "split": "train"|"eval", optional "previous": Solution fields}.
"""

from __future__ import annotations

import logging
import random
import shutil
import threading
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from practicum.envs.base import HEADLINE, AgentOutcome, AgentTask, Env, Start, StepResult, Task
from practicum.envs.mle.actions import prompts
from practicum.envs.mle.actions.parsing import ActionParseError
from practicum.envs.mle.actions.section import parse_section
from practicum.envs.mle.actions.self_improve import (
    Solution,
    SolutionBuffer,
    improvement_prompt,
)
from practicum.envs.mle.actions.template import Template, parse_reply
from practicum.envs.mle.competitions.config import CompetitionError
from practicum.envs.mle.credit import evidence
from practicum.envs.mle.credit.instrument import LLMInstrumenter, instrument
from practicum.envs.mle.credit.launch import run_instrumented
from practicum.envs.mle.credit.milestones import new_nonce
from practicum.envs.mle.credit.outcome import (
    RunOutcome,
    grade_workdir,
    judge_run,
    not_run,
    solution_output,
)
from practicum.envs.mle.credit.rewards import RewardConfig, mle_reward
from practicum.envs.mle.episode_data import CompetitionData
from practicum.envs.mle.run_cache import RunCache
from practicum.envs.sandbox import Limits, SandboxError, run_python

if TYPE_CHECKING:
    from practicum.engine.service import ModelService
    from practicum.envs.mle.options import MleOptions

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 200
"""Template prompts: the task summary is cut to this."""
MAX_DESCRIPTION_CHARS = 1500
"""Script prompts: the competition description is cut to this."""
MAX_SUBMISSION_BYTES = 64 * 2**20
"""A larger submission.csv is invalid (and never read into memory)."""


@dataclass
class _Progress:
    """One episode so far."""

    attempts: int = 0
    malformed: int = 0
    runs: int = 0
    """Attempts that ran in the sandbox."""
    reused: int = 0
    """Of those, runs whose outcome came from an earlier run of the same program."""
    llm_runs: int = 0
    """Runs whose markers the LLM instrumenter inserted."""
    instrument_seconds: float = 0.0
    """Time spent in LLM instrumenter calls."""
    best_reward: float | None = None
    valid: bool = False
    milestones: int = 0
    score_credit: float | None = None
    """Best oriented score of a valid attempt."""

    def record(self, outcome: RunOutcome) -> None:
        """Count a run that went through the sandbox."""
        self.runs += 1
        self.llm_runs += outcome.instrumenter == "llm"
        self.instrument_seconds += outcome.instrument_seconds
        self.valid |= outcome.valid
        self.milestones = max(self.milestones, len(outcome.milestones))
        if outcome.valid:
            credit = outcome.reward.score_credit
            self.score_credit = (
                credit if self.score_credit is None else max(self.score_credit, credit)
            )


class MleEnv(Env):
    """One ML-engineering episode at a time (module docstring). Thread-compatible: one env per
    episode; the shared pieces (competition cache, buffer, instrumenter) are thread-safe."""

    def __init__(
        self,
        options: MleOptions,
        competitions: dict[str, CompetitionData] | Any,
        buffer: SolutionBuffer | None = None,
        instrumenter: LLMInstrumenter | None = None,
        env_failure_reward: float = 0.0,
        runs: RunCache | None = None,
    ):
        self.options = options
        self.competitions = competitions
        """competition id -> CompetitionData (a dict, or a lazy mapping with __getitem__)."""
        self.buffer = buffer
        self.instrumenter = instrumenter
        """The LLM that inserts milestone prints; None: the rules only."""
        self.env_failure_reward = env_failure_reward
        """Reward of an episode the sandbox failed (`SuiteContext.failure_reward`)."""
        self.runs = runs if instrumenter is None else None  # an LLM's marks differ per copy
        """Outcomes of programs already run, shared by the suite's envs (`run_cache`)."""
        self.limits = Limits(
            wall_seconds=options.wall_seconds,
            memory_mb=options.memory_mb,
            max_processes=options.max_processes,
        )
        self.reward_config = RewardConfig(
            failure_reward=options.failure_reward,
            milestone_credit=options.milestone_credit,
            partial_credit=options.partial_credit,
            lower_is_better_transform=options.lower_is_better_transform,
            beta=options.beta,
            score_scale=options.score_scale,
        )
        self.rng = random.Random(0)
        self.prompt_mode = "scratch"
        self.last_outcome: RunOutcome | None = None
        """The typed outcome of the last step, for callers that drive the env themselves
        (`mle run`, tests); the runtime reads only the StepResult."""
        self._task: Task | None = None
        self._data: CompetitionData | None = None
        self._progress = _Progress()
        self._workdirs: list[Path] = []
        # Removed with the env even if nobody calls close (a forgotten env, an episode cut short).
        self._remove_workdirs = weakref.finalize(self, _remove_all, self._workdirs)
        self._cancel = threading.Event()
        """Set by kill(): the sandboxed run in progress (and any later one) stops at once."""

    # -- reset --------------------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Start:
        self.close()
        self.rng = random.Random(seed)
        cid = task.data.get("competition", task.task_id)
        self._task, self._data = task, self.competitions[cid]
        self._progress, self.last_outcome = _Progress(), None
        mode = self.options.mode
        if mode != "script" and self._region() is None:
            raise CompetitionError(
                f"competition '{cid}' has no {mode} script (set "
                f"target_columns in its config.yaml, or use mode: script)"
            )
        prompt = self._scratch_prompt()
        previous = self._previous(task, cid)
        self.prompt_mode = "improve" if previous is not None else "scratch"
        if previous is not None:
            reply_format = {"template": prompts.LINE_REPLY, "section": prompts.SECTION_REPLY}.get(
                mode
            )
            prompt = improvement_prompt(
                prompt,
                previous.code,
                previous.output,
                previous.score,
                mode="script" if mode == "script" else "template",
                lower_is_better=self._data.comp.lower_is_better,
                max_output_chars=self.options.output_chars,
                reply_format=reply_format,
            )
        if mode == "template":
            system, examples = (
                prompts.LINE_SYSTEM_PROMPT,
                [dict(m) for m in prompts.LINE_EXAMPLE_MESSAGES],
            )
        elif mode == "section":
            system, examples = prompts.SECTION_SYSTEM_PROMPT, prompts.section_examples()
        else:
            system, examples = prompts.SYSTEM_PROMPT, []
        # the one-line reply ends at its line break, not at the token budget
        stops = ["\n"] if mode == "template" and self.options.line_stop else []
        return Start(
            [{"role": "system", "content": system}, *examples, {"role": "user", "content": prompt}],
            stop_strings=stops,
        )

    def agent_task(self, task: Task, seed: int = 0) -> AgentTask:
        """An outside agent (`rollout.agent`, e.g. AIDE) gets the competition's description
        and a folder holding only its public files (in data/); it leaves submission.csv. The
        private answers and the whole data root are hidden, as from the env's own runs."""
        self.close()
        cid = task.data.get("competition", task.task_id)
        self._task, self._data = task, self.competitions[cid]
        self._progress, self.last_outcome = _Progress(), None
        workdir = self._data.new_workdir(self.options.workdir_root)
        self._workdirs.append(workdir)
        data = workdir / "data"  # apart from what the agent writes (AIDE: its workspaces)
        data.mkdir()
        for f in sorted(workdir.iterdir()):
            if f != data:
                f.rename(data / f.name)
        comp = self._data.comp
        files = ", ".join(sorted(p.name for p in data.iterdir()))
        direction = "lower" if comp.lower_is_better else "higher"
        prompt = (
            f"{comp.description.strip()}\n\nThe data files are in the folder data/ "
            f"({files}). Evaluation: {comp.metric} ({direction} is better). Write your "
            f"predictions for the test set to submission.csv in the current folder."
        )
        return AgentTask(prompt, workdir, list(self._data.hidden))

    def agent_grade(self, outcome: AgentOutcome) -> StepResult:
        """submission.csv in the agent's folder (or, failing that, the newest one below it, as
        AIDE leaves it in its workspace), graded without following links; the reward of a run
        with no milestones measured (`mle_reward`: the failure reward, or the oriented score)."""
        comp, data = self._data.comp, self._data
        folder = _submission_folder(outcome.workdir)
        valid, score, reason, rows = grade_workdir(folder, comp, data.answers, MAX_SUBMISSION_BYTES)
        reward = mle_reward(
            [], valid, score, comp.lower_is_better, self.reward_config, data.anchors
        )
        self._progress.attempts, self._progress.valid = 1, valid
        if valid:
            self._progress.score_credit = reward.score_credit
        return StepResult(
            reward=reward.total,
            done=True,
            solved=valid,
            metrics=self.metrics(),
            info={
                "valid": valid,
                "score": score,
                "reason": reason,
                "rows": rows,
                "submission": str(folder.relative_to(outcome.workdir)),
            },
        )

    def _region(self) -> Template | None:
        """The fixed script whose region the reply fills (None in script mode)."""
        return {"template": self._data.template, "section": self._data.section}.get(
            self.options.mode
        )

    def _scratch_prompt(self) -> str:
        data, comp = self._data, self._data.comp
        summary = prompts.task_summary(comp.description, MAX_SUMMARY_CHARS)
        if self.options.mode == "template":
            return prompts.line_prompt(
                comp.name, summary, comp.metric, comp.lower_is_better, data.template, data.kind
            )
        if self.options.mode == "section":
            section = comp.practicum
            return prompts.section_prompt(
                comp.name,
                summary,
                comp.metric,
                comp.lower_is_better,
                data.section,
                data.columns,
                data.sizes.train,
                data.sizes.test,
                section.target_columns[0],
                section.id_column,
            )
        files = sorted(p.name for p in data.paths.public.iterdir() if p.is_file())
        return prompts.scratch_prompt(
            comp.description, files, mode="script", max_description_chars=MAX_DESCRIPTION_CHARS
        )

    def _previous(self, task: Task, cid: str) -> Solution | None:
        given = task.data.get("previous")
        if given:
            return given if isinstance(given, Solution) else Solution(**given)
        if task.data.get("split", "train") != "train" or self.buffer is None:
            return None
        return self.buffer.previous_for(task.group, cid, self.rng, self.options.improve_prob)

    # -- step ---------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        if self._data is None:
            raise RuntimeError("MleEnv.step called before reset")
        progress = self._progress
        progress.attempts += 1
        last = progress.attempts >= self.options.attempts
        try:
            if self.options.mode == "section":
                code, written = parse_section(action, self._region(), self.options.salvage)
                plan = ""
            else:
                code, written, plan = parse_reply(action, self._region(), self.options.salvage)
        except ActionParseError as err:
            return self._malformed(str(err), action, last)
        outcome = self.last_outcome = self._run(code)
        solution = Solution(
            code=written,
            output=solution_output(outcome.stdout, self.options.output_chars),
            score=outcome.score,
            reward=outcome.reward.total,
            plan=plan,
            valid=outcome.valid,
        )
        info = self._info(outcome, solution)
        if outcome.infra_error is not None:  # the sandbox failed, not the policy
            return StepResult(
                done=True,
                reward=self.env_failure_reward,
                metrics=self.metrics(),
                solved=progress.valid,
                failure=outcome.failure_reason,
                info=info,
            )
        self._remember(solution)
        progress.record(outcome)
        reward = self._reward(outcome.reward.total, last)
        observation = outcome.summary(self.options.output_chars)
        if not last:
            observation += "\n\nImprove your solution and reply again in the same format."
        # a run killed at the time limit reports no duration: its weight in duration-aware
        # batching stays at the floor instead of the largest (the failure is not a slow model)
        duration = 0.0 if outcome.timed_out else outcome.duration
        return StepResult(
            observation,
            reward,
            last,
            duration,
            metrics=self.metrics(),
            solved=progress.valid if last else None,
            info=info,
        )

    def _malformed(self, reason: str, action: str, last: bool) -> StepResult:
        """An unparsable reply: not run, the failure reward; the episode ends on the last try."""
        self._progress.malformed += 1
        outcome = self.last_outcome = not_run(
            self._data.comp, self.reward_config, "unparsable reply", parse_error=reason
        )
        solution = Solution(
            code=action.strip()[:500],
            output="",
            score=None,
            reward=outcome.reward.total,
            valid=False,
        )
        fmt = {
            "template": "one line `model = ...`",
            "section": "only the code of the section (ending with `predictions = ...`) in "
            "one ```python block",
        }.get(self.options.mode, "a short plan and one ```python block")
        observation = f"Your reply could not be run: {reason}. Reply with {fmt}."
        return StepResult(
            observation,
            self._reward(outcome.reward.total, last),
            last,
            malformed=True,
            metrics=self.metrics(),
            solved=self._progress.valid if last else None,
            info=self._info(outcome, solution),
        )

    def _run(self, code: str) -> RunOutcome:
        """Run `code` in the sandbox and judge it, or reuse a run of the same program."""
        if self.runs is None:
            return self._run_fresh(code)[0]
        got = self.runs.outcome(
            (self._data.comp.id, code), lambda: self._run_fresh(code), self._cancel
        )
        if got is None:
            return not_run(
                self._data.comp, self.reward_config, "cancelled by kill()", infra_error="cancelled"
            )
        outcome, reused = got
        self._progress.reused += reused
        return outcome

    def _run_fresh(self, code: str) -> tuple[RunOutcome, bool]:
        """The judged outcome of a new sandboxed run, and whether it may be reused (the code
        ran to its end: nothing failed, cancelled or killed it)."""
        data = self._data
        nonce = new_nonce()
        inst = instrument(code, nonce, self.instrumenter)
        workdir = data.new_workdir(self.options.workdir_root)
        self._workdirs.append(workdir)
        try:
            if inst.method == "none":  # unparsable or nothing to mark: run as written
                run = run_python(
                    code,
                    workdir,
                    self.limits,
                    hidden_paths=data.hidden,
                    backend=self.options.backend,
                    cancel=self._cancel,
                )
            else:
                marked, lines = evidence.attach(inst.code, nonce)
                run = run_instrumented(
                    code,
                    marked,
                    lines,
                    workdir,
                    self.limits,
                    hidden_paths=data.hidden,
                    backend=self.options.backend,
                    cancel=self._cancel,
                )
        except SandboxError as err:
            log.warning("sandbox failed on %s: %s", data.comp.id, err)
            failed = not_run(
                data.comp,
                self.reward_config,
                f"sandbox error: {err}",
                infra_error=str(err),
                instrumenter=inst.method,
                instrument_rejected=inst.rejected_reason,
            )
            return failed, False
        if run.killed_reason == "cancelled":  # runtime shutdown: nothing to grade
            cancelled = not_run(
                data.comp,
                self.reward_config,
                "cancelled by kill()",
                infra_error="cancelled",
                instrumenter=inst.method,
                instrument_rejected=inst.rejected_reason,
            )
            return cancelled, False
        judged = judge_run(
            run,
            code,
            inst,
            nonce,
            workdir,
            data.comp,
            data.answers,
            self.reward_config,
            MAX_SUBMISSION_BYTES,
            data.sizes,
            data.anchors,
        )
        return judged, run.killed_reason is None

    def _reward(self, reward: float, last: bool) -> float:
        """This attempt's reward; on the last, the best of the episode's attempts."""
        best = self._progress.best_reward
        self._progress.best_reward = reward if best is None else max(best, reward)
        return self._progress.best_reward if last else reward

    def metrics(self) -> dict[str, float]:
        """The episode so far: headline/valid (1/0: some attempt was; shown on progress lines),
        most milestones an attempt reached, best score credit of a valid attempt (0 if none),
        attempts, malformed replies, improve_prompt (1/0) and, with an LLM instrumenter, the share
        of runs it marked and the seconds its calls took."""
        p = self._progress
        metrics = {
            f"{HEADLINE}valid": float(p.valid),
            "milestones": float(p.milestones),
            "score_credit": 0.0 if p.score_credit is None else p.score_credit,
            "attempts": float(p.attempts),
            "malformed": float(p.malformed),
            "improve_prompt": float(self.prompt_mode == "improve"),
        }
        if self.runs is not None:
            metrics["reused_runs"] = float(p.reused)
        if self.instrumenter is not None:
            metrics["llm_instrumented"] = p.llm_runs / max(1, p.runs)
            metrics["instrument_seconds"] = p.instrument_seconds
        return metrics

    def _info(self, outcome: RunOutcome, solution: Solution) -> dict[str, Any]:
        return {
            **outcome.info(),
            "attempt": self._progress.attempts,
            "prompt_mode": self.prompt_mode,
            "solution": asdict(solution),
        }

    def _remember(self, solution: Solution) -> None:
        task = self._task
        if self.buffer is None or task.data.get("split", "train") != "train" or not solution.valid:
            return
        self.buffer.add(task.data.get("competition", task.task_id), solution)

    def kill(self) -> None:
        """Stop the sandboxed run in progress now (from another thread, at shutdown)."""
        self._cancel.set()

    def close(self) -> None:
        _remove_all(self._workdirs)


def _submission_folder(workdir: Path) -> Path:
    """The folder holding the submission to grade: the work folder itself when it has one, else
    the one whose submission.csv was written last (links never followed)."""
    import os

    if os.path.lexists(workdir / "submission.csv"):
        return workdir
    found = []
    for folder, _dirs, files in os.walk(workdir, followlinks=False):
        if "submission.csv" in files:
            st = os.lstat(os.path.join(folder, "submission.csv"))
            found.append((st.st_mtime, folder))
    return Path(max(found)[1]) if found else workdir


def _remove_all(workdirs: list[Path]) -> None:
    for workdir in workdirs:
        # as root, or as the uid the sandbox ran as: both may delete it
        shutil.rmtree(workdir, ignore_errors=True)
    workdirs.clear()


@dataclass
class MleEnvFactory:
    """`Suite.make_env`: a fresh MleEnv per episode; the envs of a suite share the options, the
    competition cache and the solution buffer."""

    options: MleOptions
    competitions: Any
    """competition id -> CompetitionData (`episode_data.CompetitionCache`)."""
    buffer: SolutionBuffer | None = None
    env_failure_reward: float = 0.0
    runs: RunCache | None = None
    """Shared by every env of the suite (`options.reuse_runs`)."""

    def __call__(self, service: ModelService) -> MleEnv:
        client = service.client(self.options.instrumenter)  # None for "rules"
        opts = self.options
        llm = (
            LLMInstrumenter(
                client,
                opts.instrumenter_max_new_tokens,
                opts.instrumenter_max_chars,
                opts.instrumenter_protocol,
            )
            if client is not None
            else None
        )
        return MleEnv(
            self.options, self.competitions, self.buffer, llm, self.env_failure_reward, self.runs
        )
