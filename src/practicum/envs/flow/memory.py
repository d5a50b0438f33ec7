"""The flow's shared memory: the query, its files, and the ordered action steps.

As in AgentFlow (arXiv 2510.05592, `models/memory.py`): each step records the tool, the
sub-goal, the command and the result, and the whole memory is rendered verbatim into the
planner's and verifier's prompts (so every planner turn sees a freshly rendered prompt).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    tool: str
    sub_goal: str
    command: str
    result: str
    error: bool = False
    value: str = ""
    """Short answer-like part of the result (rules roles read it)."""


@dataclass
class Memory:
    query: str
    files: list[dict[str, str]] = field(default_factory=list)
    """[{file_name, description}] given with the query (none for the built-in tasks)."""
    steps: list[Step] = field(default_factory=list)

    def add(self, step: Step) -> None:
        self.steps.append(step)

    def render(self) -> str:
        """The memory as the prompts show it (verbatim, in order)."""
        lines = [f"Query: {self.query}"]
        if self.files:
            lines.append(
                "Files: " + "; ".join(f"{f['file_name']} ({f['description']})" for f in self.files)
            )
        if not self.steps:
            lines.append("Actions so far: none.")
        for i, s in enumerate(self.steps, 1):
            lines += [
                f"Action Step {i}:",
                f"  Tool: {s.tool}",
                f"  Sub-Goal: {s.sub_goal}",
                f"  Command: {s.command}",
                f"  Result: {s.result}",
            ]
        return "\n".join(lines)
