"""The AgentFlow episode (arXiv 2510.05592): planner, executor, verifier, generator, memory.

    reset:  memory <- query; the analyst (frozen) analyses the query; the first planner prompt
    step(planner reply):                      # the trainable policy's action = one plan
        parse Context / Sub-Goal / Tool Name  (malformed -> an error step in memory)
        executor (frozen) writes the command -> the tool runs (sandboxed, timed)
        result appended to memory
        steps >= max_steps or time up -> generator
        verifier (frozen): STOP -> generator; CONTINUE -> next planner prompt (`context`)
    generator (frozen) writes the final answer; the exact check gives the reward (0/1).

Reward = solved + hop_credit * (fraction of the task's chain hops some successful tool result
shows; `tasks.hop_fraction`). Flow-GRPO's outcome reward is the final 0/1 answer check,
broadcast to every planner turn (arXiv 2510.05592); the hop term is an addition for tasks where
a small planner never reaches a solved episode, so a group of rollouts still differs. With
`hop_credit < 1` every solved episode outranks every unsolved one, and exact-match accuracy
(`acc/<family>`) stays the reported metric. The hop term reads only tool results, so
repeating a hop, stuffing names or copying the query earns at most the hops actually looked up.

Each planner turn carries `grammar` (`flow.grammar.planner_grammar`): the three plan fields,
bounded, the tool one of the episode's tools.

The time limit counts the flow's own work (analysis, tools, frozen roles), not the time the
planner's turns wait in batched generation, so a busy machine does not shorten episodes.

Every planner prompt is rendered afresh from memory and returned as `StepResult.context`, so
each planner turn is its own training row (Flow-GRPO's per-turn samples).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.flow import prompts
from practicum.envs.flow.corpus import World
from practicum.envs.flow.grammar import planner_grammar
from practicum.envs.flow.memory import Memory, Step
from practicum.envs.flow.parsing import parse_plan
from practicum.envs.flow.roles import Roles
from practicum.envs.flow.tasks import check_answer, hop_fraction
from practicum.envs.flow.tools import FlowTool, Search, build_tools
from practicum.envs.sandbox import Limits
from practicum.envs.scratch import ScratchDir
from practicum.tools import ToolResult, ToolSet


class FlowEnv(Env):
    def __init__(
        self,
        roles: Roles,
        world: World,
        tool_names: list[str],
        limits: Limits,
        max_steps: tuple[int, int] = (3, 10),
        max_seconds: tuple[float, float] = (120.0, 300.0),
        search: Search | None = None,
        hop_credit: float = 0.0,
        grammar_chars: int | None = 100,
        grammar_tokens: int = 24,
    ):
        self.roles, self.world, self.tool_names, self.limits = roles, world, tool_names, limits
        self.hop_credit = hop_credit
        self.grammar = (
            None
            if grammar_chars is None
            else planner_grammar(tool_names, grammar_chars, grammar_tokens)
        )
        self.max_steps_by_split, self.max_seconds_by_split = max_steps, max_seconds
        self.search = search
        self._scratch: ScratchDir | None = None
        self.tools: ToolSet[FlowTool] = ToolSet(())
        self.task: Task | None = None

    @property
    def _workdir(self) -> Path | None:
        return self._scratch.path if self._scratch else None

    # -- episode ----------------------------------------------------------------------------------
    def reset(self, task: Task, seed: int = 0) -> Start:
        if self._scratch is None:
            self._scratch = scratch = ScratchDir(self, "practicum-flow-")
            self.tools = build_tools(
                self.tool_names, self.world, scratch.path, self.limits, self.search
            )
        self.task = task
        evaluating = task.data.get("split") == "eval"
        self.max_steps = self.max_steps_by_split[evaluating]
        self.max_seconds = self.max_seconds_by_split[evaluating]
        self.memory = Memory(task.data["question"])
        self.elapsed = 0.0
        start = time.monotonic()
        self.analysis = self.roles.analyse(self.memory.query, self.metas)
        self.malformed = self.tool_errors = 0
        self.elapsed += time.monotonic() - start
        return Start(self.planner_messages(), list(prompts.PLANNER_STOPS), self.grammar)

    @property
    def metas(self):
        return [t.meta for t in self.tools.values()]

    def planner_messages(self):
        return prompts.planner_messages(
            self.memory,
            self.analysis,
            len(self.memory.steps) + 1,
            self.max_steps,
            self.metas,
            documents=not self.roles.relational,
        )

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "reset() before step()"
        start = time.monotonic()
        try:
            return self._step(action)
        finally:
            self.elapsed += time.monotonic() - start

    def _step(self, action: str) -> StepResult:
        start_step = time.monotonic()
        plan = parse_plan(action, self.tools.names)
        info: dict = {"flow": {"step": len(self.memory.steps) + 1, "plan": asdict(plan)}}
        if len(self.memory.steps) == 0:
            info["flow"]["query"], info["flow"]["analysis"] = self.memory.query, self.analysis
        if plan.malformed:
            self.malformed += 1
            out, command, raw = (
                ToolResult(
                    f"Error: malformed plan ({plan.reason}); end with Context:, Sub-Goal:, "
                    "Tool Name:",
                    True,
                ),
                "",
                "",
            )
        else:
            tool = self.tools[plan.tool]
            command, raw = self.roles.command(self.memory.query, plan, tool.meta, self.memory)
            try:
                out = tool.run(command)
            except Exception as e:  # a tool bug is an error result, never a crash
                out = ToolResult(f"Error: {type(e).__name__}: {e}"[:200], True)
        self.tool_errors += out.error and not plan.malformed
        self.memory.add(
            Step(
                plan.tool or plan.raw_tool or "(none)",
                plan.sub_goal,
                command,
                out.text,
                out.error,
                out.value,
            )
        )
        info["flow"].update(
            executor=raw,
            command=command,
            result=out.text,
            error=out.error,
            tool_seconds=out.seconds,
        )
        if len(self.memory.steps) >= self.max_steps:
            return self._finish(info, plan.malformed, "max_steps")
        if self.elapsed + time.monotonic() - start_step >= self.max_seconds:
            return self._finish(info, plan.malformed, "max_seconds")
        verdict, raw_v = self.roles.verdict(self.memory, self.analysis)
        info["flow"].update(verifier=raw_v, verdict=verdict)
        if verdict == "STOP":
            return self._finish(info, plan.malformed, "verifier")
        return StepResult(
            context=self.planner_messages(),
            malformed=plan.malformed,
            metrics=self._metrics(),
            info=info,
            grammar=self.grammar,
        )

    def _finish(self, info: dict, malformed: bool, reason: str) -> StepResult:
        assert self.task is not None, "reset() before step()"
        answer, raw = self.roles.answer(self.memory)
        correct = check_answer(self.task, answer)
        judged = False
        if not correct and self.roles.specs.judge is not None:
            judged = self.roles.judge(self.memory.query, answer, self.task.data["answer"])
        solved = correct or judged
        hops = self.task.data.get("hops") or []
        found = hop_fraction(hops, [s.result for s in self.memory.steps if not s.error])
        info["flow"].update(
            generator=raw,
            answer=answer,
            gold=self.task.data["answer"],
            correct=correct,
            judged=judged,
            stopped_by=reason,
            memory=self.memory.render(),
            hops=found,
        )
        metrics = self._metrics() | {
            f"acc/{self.task.data['family']}": float(solved),
            "verifier_stop": float(reason == "verifier"),
        }
        if hops:
            metrics[f"hops/{self.task.data['family']}"] = found
        reward = float(solved) + (self.hop_credit * found if hops else 0.0)
        return StepResult(
            reward=reward, done=True, solved=solved, malformed=malformed, metrics=metrics, info=info
        )

    def _metrics(self) -> dict[str, float]:
        steps = len(self.memory.steps)
        calls = steps - self.malformed
        return {
            "steps": float(steps),
            "malformed_plans": float(self.malformed),
            "tool_calls": float(calls),
            "tool_errors": float(self.tool_errors),
            "tool_error_rate": self.tool_errors / calls if calls else 0.0,
        }

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None
