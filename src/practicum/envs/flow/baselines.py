"""The ablation's baselines on the flow's tasks, tools and checks (`task.options.mode`):

direct            the policy answers alone, one turn ("Answer: <value>"), no tools, no flow
tool_integrated   the policy calls the same tools itself in one growing sequence
                  ("Tool: <name>" + "Command: <input>" -> "Result: ..."), then answers; no
                  planner/executor/verifier/generator split (a ReAct-style single agent)
"""

from __future__ import annotations

import re
from pathlib import Path

from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.flow.corpus import World
from practicum.envs.flow.parsing import extract_answer, normalise_tool, parse_command
from practicum.envs.flow.tasks import check_answer
from practicum.envs.flow.tools import FlowTool, Search, build_tools
from practicum.envs.sandbox import Limits
from practicum.envs.scratch import ScratchDir
from practicum.tools import ToolSet

DIRECT_SYSTEM = "Answer the question. Reply with one line: Answer: <the answer only>"
DIRECT_EXAMPLE = [
    {"role": "user", "content": "Question: Calculate 17 * 3 - 4."},
    {"role": "assistant", "content": "Answer: 47"},
]


def _finish(task: Task, answer: str, metrics: dict, info: dict) -> StepResult:
    ok = check_answer(task, answer)
    return StepResult(
        reward=float(ok),
        done=True,
        solved=ok,
        metrics=metrics | {f"acc/{task.data['family']}": float(ok)},
        info=info | {"answer": answer, "gold": task.data["answer"]},
    )


class DirectEnv(Env):
    def reset(self, task: Task, seed: int = 0) -> Start:
        self.task = task
        return Start(
            [
                {"role": "system", "content": DIRECT_SYSTEM},
                *DIRECT_EXAMPLE,
                {"role": "user", "content": f"Question: {task.data['question']}"},
            ]
        )

    def step(self, action: str) -> StepResult:
        return _finish(self.task, extract_answer(action), {"steps": 1.0}, {})


TI_SYSTEM = (
    "You solve the question with tools. Tools:\n{cards}\nTo call a tool reply with two "
    "lines:\nTool: <name>\nCommand: <input>\nYou will see the result. When you know the "
    "answer reply: Answer: <the answer only>"
)
TI_EXAMPLE = [
    {"role": "user", "content": "Question: What is the region of the headquarters of Dal Labs?"},
    {"role": "assistant", "content": "Tool: lookup\nCommand: Dal Labs | headquarters"},
    {"role": "user", "content": "Result: The headquarters of Dal Labs is Mirven."},
    {"role": "assistant", "content": "Tool: lookup\nCommand: Mirven | region"},
    {"role": "user", "content": "Result: The region of Mirven is Sa Coast."},
    {"role": "assistant", "content": "Answer: Sa Coast"},
]
_TOOL_LINE = re.compile(r"tool\s*(?:name)?\s*:\s*(.+)", re.I)


class ToolIntegratedEnv(Env):
    def __init__(
        self,
        world: World,
        tool_names: list[str],
        limits: Limits,
        max_steps: tuple[int, int],
        search: Search | None = None,
    ):
        self.world, self.tool_names, self.limits = world, tool_names, limits
        self.max_steps_by_split, self.search = max_steps, search
        self._scratch: ScratchDir | None = None
        self.tools: ToolSet[FlowTool] = ToolSet(())

    @property
    def _workdir(self) -> Path | None:
        return self._scratch.path if self._scratch else None

    def reset(self, task: Task, seed: int = 0) -> Start:
        if self._scratch is None:
            self._scratch = scratch = ScratchDir(self, "practicum-flow-ti-")
            self.tools = build_tools(
                self.tool_names, self.world, scratch.path, self.limits, self.search
            )
        self.task, self.calls, self.errors, self.turns = task, 0, 0, 0
        self.max_steps = self.max_steps_by_split[task.data.get("split") == "eval"]
        cards = "\n".join(t.meta.card() for t in self.tools.values())
        return Start(
            [
                {"role": "system", "content": TI_SYSTEM.format(cards=cards)},
                *TI_EXAMPLE,
                {"role": "user", "content": f"Question: {self.task.data['question']}"},
            ],
            ["\nResult:"],
        )

    def _metrics(self) -> dict:
        return {
            "steps": float(self.calls),
            "tool_calls": float(self.calls),
            "tool_errors": float(self.errors),
            "tool_error_rate": self.errors / self.calls if self.calls else 0.0,
        }

    def step(self, action: str) -> StepResult:
        """Up to max_steps tool calls, then one more turn to answer (malformed turns count)."""
        self.turns += 1
        tool_line = _TOOL_LINE.search(action)
        if re.search(r"answer\s*:", action, re.I) and not tool_line:
            return _finish(self.task, extract_answer(action), self._metrics(), {})
        name = (
            normalise_tool(tool_line.group(1).splitlines()[0], self.tools.names)
            if tool_line
            else ""
        )
        if self.turns > self.max_steps:
            return _finish(self.task, "", self._metrics(), {"stopped_by": "max_steps"})
        if not name:
            return StepResult(
                "Reply with 'Tool: <name>' and 'Command: <input>', or 'Answer: <answer>'.",
                malformed=True,
                metrics=self._metrics(),
            )
        out = self.tools.run(name, parse_command(action, name))
        self.calls += 1
        self.errors += out.error
        return StepResult(
            f"Result: {out.text}", metrics=self._metrics(), info={"tool": name, "result": out.text}
        )

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None
