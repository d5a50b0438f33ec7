"""The ML-engineering environment (arXiv 2509.01684): write code, run it sandboxed, get graded.

One episode = one competition and `attempts` actions (default 1). Each action:

    reply --parse--> code          script mode: plan + one ```python block (actions.py)
                                   template mode: the region of a fixed script (default_template)
          --instrument--> code + milestone prints with a fresh secret nonce (instrument.py)
          --sandbox--> stdout      a fresh work folder holding ONLY the public files; the private
                                   answers (and the whole data root) are hidden paths
          --parse_milestones--> distinct milestones reached
          --grade--> submission.csv read without following symlinks, graded by grade.py
          --mle_reward--> failure -10 / +0.1 per milestone / oriented score (rewards.py)

StepResult.duration is the sandbox run time (feeds the duration-aware weights). An unparsable
reply is not run: the observation says why and the reward is the failure reward. With several
attempts the observation (run summary, markers redacted) is shown and the agent tries again;
the episode's reward is the best attempt's.

Prompt modes (self-improvement, Sec. 3.3): on training tasks, with probability `improve_prob`
the prompt shows a previous valid solution of the same competition from the shared
`SolutionBuffer` (its code, output and score) and asks for an improvement; otherwise "from
scratch". Held-out tasks are always from scratch unless the task names a previous solution
(`evaluate.py` does, for scratch-then-improve evaluation).

Template mode shows few-shot chat turns (`example_messages`, read by the runtime) and, with
`salvage`, accepts a lone `model = ...` line inside an otherwise malformed reply.

Forged markers: markers printed with a wrong nonce earn nothing. The nonce does sit in the
running script, so code that reads its own source or code objects could replay it; runs whose
code looks self-inspecting (`self_inspection`) get no milestone credit. The heuristic can be
evaded by obfuscated code; the most such a forgery gains is the milestone credit (+0.7), never
a valid score.

Task.data: {"competition": id, "split": "train"|"eval", optional "previous": Solution fields}.
"""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from practicum.envs.base import StepResult, Task
from practicum.envs.mle import prompts
from practicum.envs.mle.actions import ActionParseError, extract_code, parse_script_action
from practicum.envs.mle.competition import Competition
from practicum.envs.mle.instrument import LLMInstrumenter, instrument
from practicum.envs.mle.outcome import grade_workdir, run_summary, self_inspection, solution_output
from practicum.envs.mle.milestones import new_nonce, parse_milestones
from practicum.envs.mle.prepared_data import PreparedPaths, read_answers
from practicum.envs.mle.rewards import RewardConfig, mle_reward
from practicum.envs.mle.self_improve import (
    Solution,
    SolutionBuffer,
    improvement_prompt,
    sample_prompt_mode,
)
from practicum.envs.mle.sklearn_template import default_template
from practicum.envs.mle.template import Template, fill_template, salvage_region
from practicum.envs.sandbox import Limits, SandboxError, run_python

log = logging.getLogger(__name__)

_KINDS = {"binary": "classification", "multiclass": "classification",
          "classification": "classification", "regression": "regression",
          "text-classification": "classification", "text_classification": "classification"}


@dataclass(frozen=True)
class EnvSettings:
    """What every MleEnv of a suite shares (built by `suite.MleEnvFactory` from task options)."""

    mode: Literal["template", "script"] = "template"
    """template: the reply fills one region of a fixed script; script: plan + whole script."""
    limits: Limits = field(default_factory=lambda: Limits(wall_seconds=60, memory_mb=2048))
    """Sandbox limits of one run."""
    backend: str = "auto"
    """Sandbox backend (auto, bwrap, namespaces)."""
    attempts: int = 1
    """Actions per episode; > 1 shows each run's summary and asks again (reward: best attempt)."""
    improve_prob: float = 0.5
    """Probability of a self-improvement prompt on a training task with a stored solution."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Failure reward, milestone credit, orientation of lower-is-better scores."""
    salvage: bool = True
    """Template mode: accept a lone `model = ...` line inside a malformed reply."""
    max_summary_chars: int = 200
    """Length of the task summary in template prompts."""
    max_description_chars: int = 1500
    """Script mode: the competition description is cut to this."""
    output_chars: int = 600
    """Run output shown in observations and improvement prompts."""
    workdir_root: str | None = None
    """Folder for per-episode work folders (default: the system temp folder)."""
    max_submission_mb: int = 64
    """A larger submission.csv is invalid (and never read into memory)."""


@dataclass
class CompetitionData:
    """A prepared competition, loaded once per process and shared by environments."""

    comp: Competition
    paths: PreparedPaths
    answers: pd.DataFrame
    template: Template | None
    hidden: tuple[Path, ...]
    """Host paths unreadable inside the sandbox: the private folder and the whole data root."""

    @property
    def kind(self) -> str:
        return _KINDS.get((self.comp.practicum.task or "").lower(), "classification")


def load_competition_data(comp: Competition, data_root: Path | None) -> CompetitionData:
    """Prepare (cached on disk) and load what an episode needs: public files, answers, template."""
    paths = comp.prepare(data_root)
    answers = read_answers(paths.answers)
    template = None
    section = comp.practicum
    if section.target_columns:
        try:
            template = default_template(section.task or "classification",
                                        section.target_columns[0], section.id_column, comp.metric)
        except ValueError as err:
            log.warning("competition %s has no template: %s", comp.id, err)
    root = paths.public.parent.parent.parent  # <data root>/<id>/prepared/public
    return CompetitionData(comp, paths, answers, template, (paths.private, root))


class MleEnv:
    """One ML-engineering episode at a time (module docstring). Thread-compatible: one env per
    episode; the shared pieces (competition cache, buffer, instrumenter) are thread-safe."""

    def __init__(self, settings: EnvSettings, competitions: dict[str, CompetitionData] | Any,
                 buffer: SolutionBuffer | None = None, llm: LLMInstrumenter | None = None,
                 seed: int = 0):
        self.settings = settings
        self.competitions = competitions
        """competition id -> CompetitionData (a dict, or a lazy mapping with __getitem__)."""
        self.buffer = buffer
        self.llm = llm
        self.rng = random.Random(seed)
        self.system_prompt: str | None = None
        self.example_messages: list[dict] | None = None
        """Few-shot chat turns the runtime puts before the first user message (template mode)."""
        self._task: Task | None = None
        self._data: CompetitionData | None = None
        self._attempt = 0
        self._best: float | None = None
        self._workdirs: list[Path] = []
        self.prompt_mode = "scratch"

    # -- reset --------------------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        self.close()
        cid = task.data.get("competition", task.task_id)
        self._task, self._data = task, self.competitions[cid]
        self._attempt, self._best = 0, None
        s = self.settings
        if s.mode == "template" and self._data.template is None:
            raise ValueError(f"competition '{cid}' has no template (set target_columns in its "
                             f"config.yaml, or use mode: script)")
        scratch = self._scratch_prompt()
        template = s.mode == "template"
        self.system_prompt = prompts.LINE_SYSTEM_PROMPT if template else prompts.SYSTEM_PROMPT
        self.example_messages = list(prompts.LINE_EXAMPLE_MESSAGES) if template else None
        previous = self._previous(task, cid)
        self.prompt_mode = "improve" if previous is not None else "scratch"
        if previous is None:
            return scratch
        return improvement_prompt(scratch, previous.code, previous.output, previous.score,
                                  mode=s.mode, lower_is_better=self._data.comp.lower_is_better,
                                  max_output_chars=s.output_chars,
                                  reply_format=prompts.LINE_REPLY if template else None)

    def _scratch_prompt(self) -> str:
        data, s = self._data, self.settings
        comp = data.comp
        if s.mode == "template":
            summary = prompts.task_summary(comp.description, s.max_summary_chars)
            return prompts.line_prompt(comp.name, summary, comp.metric, comp.lower_is_better,
                                       data.template, data.kind)
        files = sorted(p.name for p in data.paths.public.iterdir() if p.is_file())
        return prompts.scratch_prompt(comp.description, files, mode="script",
                                      max_description_chars=s.max_description_chars)

    def _previous(self, task: Task, cid: str) -> Solution | None:
        given = task.data.get("previous")
        if given:
            return given if isinstance(given, Solution) else Solution(**given)
        if task.data.get("split", "train") != "train" or self.buffer is None:
            return None
        mode = sample_prompt_mode(self.rng, self.settings.improve_prob, self.buffer.has(cid))
        return self.buffer.pick(cid, self.rng) if mode == "improve" else None

    # -- step ---------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        if self._data is None:
            raise RuntimeError("MleEnv.step called before reset")
        self._attempt += 1
        last = self._attempt >= self.settings.attempts
        try:
            code, region, plan = self._parse(action)
        except ActionParseError as err:
            return self._unparsable(str(err), action, last)
        outcome = self._run(code)
        outcome["solution"] = asdict(Solution(
            code=region, output=outcome.pop("output_for_prompt"), score=outcome["score"],
            reward=outcome["reward"], plan=plan, valid=outcome["valid"]))
        self._remember(outcome)
        return self._result(outcome, last)

    def _parse(self, reply: str) -> tuple[str, str, str]:
        """(script to run, what the policy wrote: region or script, plan)."""
        s, data = self.settings, self._data
        if s.mode == "script":
            action = parse_script_action(reply)
            return action.code, action.code, action.plan
        try:
            script = fill_template(data.template, reply)
            return script, extract_code(reply), ""
        except ActionParseError as err:
            line = salvage_region(reply, data.template.required_names) if s.salvage else None
            if line is None:
                raise
            try:
                return fill_template(data.template, line), line, ""
            except ActionParseError:
                raise err from None

    def _unparsable(self, reason: str, action: str, last: bool) -> StepResult:
        reward = self.settings.reward.failure_reward
        self._best = reward if self._best is None else max(self._best, reward)
        fmt = ("one line `model = ...`" if self.settings.mode == "template"
               else "a short plan and one ```python block")
        observation = f"Your reply could not be run: {reason}. Reply with {fmt}."
        info = {"valid": False, "score": None, "milestones": [], "failure_reason": "unparsable",
                "parse_error": reason, "attempt": self._attempt, "prompt_mode": self.prompt_mode,
                "reward_breakdown": {"total": reward, "failure": reward, "milestone_credit": 0.0,
                                     "score_credit": 0.0},
                "solution": asdict(Solution(code=action.strip()[:500], output="", score=None,
                                            reward=reward, valid=False))}
        if last:
            info["failure"] = f"unparsable action: {reason}"
        return StepResult(observation, self._best if last else reward, last, 0.0, info)

    def _run(self, code: str) -> dict[str, Any]:
        s, data = self.settings, self._data
        nonce = new_nonce()
        inst = instrument(code, nonce, self.llm)
        workdir = self._new_workdir()
        try:
            run = run_python(inst.code, workdir, s.limits, hidden_paths=data.hidden,
                             backend=s.backend)
        except SandboxError as err:  # infrastructure, not the policy's fault
            log.warning("sandbox failed on %s: %s", data.comp.id, err)
            return self._outcome([], False, None, f"sandbox error: {err}", "", "", 0.0,
                                 inst.method, None, infra=str(err))
        report = parse_milestones(run.stdout, nonce)
        inspecting = self_inspection(code)
        if inspecting and report.reached:  # it may have read the nonce from its own code
            report.forged += len(report.reached)
            report.reached = []
        valid, score, reason = grade_workdir(workdir, data.comp, data.answers,
                                             s.max_submission_mb * 2**20)
        if run.killed_reason:
            crash = f"killed ({run.killed_reason})"
        elif run.returncode not in (0, None):
            crash = f"exit code {run.returncode}"
        else:
            crash = None
        if not valid:
            reason = f"{crash}; {reason}" if crash else reason
        return self._outcome(report.reached, valid, score, reason, run.stdout, run.stderr,
                             run.duration, inst.method, inst.rejected_reason,
                             forged=report.forged, validation=report.validation_score,
                             crash=crash, inspecting=inspecting)

    def _outcome(self, reached, valid, score, reason, stdout, stderr, duration, method,
                 rejected, forged=0, validation=None, crash=None, infra=None,
                 inspecting=None) -> dict[str, Any]:
        comp = self._data.comp
        breakdown = mle_reward(reached, valid, score, comp.lower_is_better, self.settings.reward)
        return {
            "valid": valid, "score": score, "milestones": list(breakdown.details["milestones"]),
            "reward": breakdown.total, "failure_reason": None if valid else reason,
            "reward_breakdown": {"total": breakdown.total, "failure": breakdown.failure,
                                 "milestone_credit": breakdown.milestone_credit,
                                 "score_credit": breakdown.score_credit},
            "duration": duration, "instrumenter": method, "instrument_rejected": rejected,
            "forged_markers": forged, "validation_score": validation, "crash": crash,
            "infra_error": infra, "self_inspection": inspecting,
            "stdout": stdout, "stderr": stderr,
            "output_for_prompt": solution_output(stdout, self.settings.output_chars),
            "attempt": self._attempt, "prompt_mode": self.prompt_mode,
            "metric": comp.metric, "lower_is_better": comp.lower_is_better,
        }

    def _remember(self, outcome: dict[str, Any]) -> None:
        task = self._task
        if (self.buffer is None or task is None or task.data.get("split", "train") != "train"
                or not outcome["valid"]):
            return
        self.buffer.add(task.data.get("competition", task.task_id),
                        Solution(**outcome["solution"]))

    def _result(self, outcome: dict[str, Any], last: bool) -> StepResult:
        reward = outcome["reward"]
        self._best = reward if self._best is None else max(self._best, reward)
        info = {k: v for k, v in outcome.items() if k not in ("stdout", "stderr")}
        info["stdout_tail"] = outcome["stdout"][-2000:]
        info["stderr_tail"] = outcome["stderr"][-2000:]
        if outcome["infra_error"] and last:
            info["failure"] = f"sandbox error: {outcome['infra_error']}"
        observation = run_summary(outcome, self.settings.output_chars)
        if not last:
            observation += "\n\nImprove your solution and reply again in the same format."
        return StepResult(observation, self._best if last else reward, last,
                          float(outcome["duration"]), info)

    # -- workdirs -----------------------------------------------------------------------------
    def _new_workdir(self) -> Path:
        """A fresh folder holding copies of the public files only.

        Copies, not hard links: the sandbox user is given ownership of everything in its
        workdir, and a hard link would hand it the cached public file itself (to corrupt for
        later episodes).
        """
        root = self.settings.workdir_root
        if root:
            Path(root).mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="practicum-mle-", dir=root))
        self._workdirs.append(workdir)
        for src in sorted(self._data.paths.public.iterdir()):
            if src.is_file() and not src.is_symlink():
                shutil.copyfile(src, workdir / src.name)
        return workdir

    def close(self) -> None:
        for workdir in self._workdirs:
            _remove_tree(workdir)
        self._workdirs = []


def _remove_tree(path: Path) -> None:
    """Delete a workdir (as root, or as the same uid the sandbox ran as: both may delete it)."""
    shutil.rmtree(path, ignore_errors=True)
