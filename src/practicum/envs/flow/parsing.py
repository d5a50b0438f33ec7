"""Tolerant parsers for the roles' outputs: plans, commands, verdicts, final answers.

The planner must end its reply with `Context:`, `Sub-Goal:` and `Tool Name:` (AgentFlow's
`extract_context_subgoal_and_tool`); field names match case-insensitively, with or without
markdown bold, '-' or '_' in "Sub-Goal", and the tool name is normalised (case, spaces,
"_tool"/"Tool" suffixes, backticks). A reply without a Sub-Goal and a known tool is malformed.
A small planner often imitates the memory's own step format (`Tool:`, `Sub-Goal:`,
`Command:`): a line-initial `Tool:` stands for `Tool Name:` when that is missing, and a
`Command:` or `Result:` line ends a field instead of being read into it.
The verifier's verdict defaults to CONTINUE, as the paper's parser does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = r"(?:\*\*|__)?\s*{name}\s*(?:\*\*|__)?\s*:\s*(?:\*\*|__)?"
_CONTEXT = re.compile(_FIELD.format(name="context"), re.I)
_SUBGOAL = re.compile(_FIELD.format(name=r"sub[\s_-]*goal"), re.I)
_TOOL = re.compile(_FIELD.format(name=r"tool[\s_-]*name"), re.I)
_TOOL_ALIAS = re.compile(r"^[ \t]*" + _FIELD.format(name="tool"), re.I | re.M)
_MEMORY_LINE = re.compile(r"^[ \t]*(?:command|result)\s*:", re.I | re.M)


@dataclass
class Plan:
    context: str
    sub_goal: str
    tool: str
    """Normalised tool name; "" when missing or unknown."""
    raw_tool: str = ""
    malformed: bool = False
    reason: str = ""


def normalise_tool(name: str, known: list[str]) -> str:
    """'Lookup_Tool', '`calculator`', 'Python Coder' -> a name of `known`, else ""."""
    s = name.strip().strip("`*'\".").strip().lower()
    s = re.sub(r"[\s-]+", "_", s)
    s = re.sub(r"_?tool$", "", s)
    if s in known:
        return s
    for k in known:  # a known name with extra words around it ("the lookup tool")
        if re.search(rf"\b{k}\b", s.replace("_", " ")) or re.search(rf"\b{k}\b", s):
            return k
    return ""


def _field(text: str, start: re.Pattern, ends: list[re.Pattern]) -> tuple[str, int] | None:
    matches = list(start.finditer(text))  # the last one: the reply must end with the fields
    m = matches[-1] if matches else None
    if m is None:
        return None
    rest = text[m.end() :]
    cut = len(rest)
    for e in ends:
        n = e.search(rest)
        if n:
            cut = min(cut, n.start())
    return rest[:cut].strip(), m.start()


def parse_plan(text: str, known_tools: list[str]) -> Plan:
    """The plan in a planner reply (module doc); `malformed` with a reason when unusable."""
    tool = _field(text, _TOOL, [_CONTEXT, _SUBGOAL, _MEMORY_LINE])
    if tool is None:
        tool = _field(text, _TOOL_ALIAS, [_CONTEXT, _SUBGOAL, _MEMORY_LINE])
    sub = _field(text, _SUBGOAL, [_TOOL, _CONTEXT, _MEMORY_LINE, _TOOL_ALIAS])
    ctx = _field(text, _CONTEXT, [_SUBGOAL, _TOOL, _MEMORY_LINE, _TOOL_ALIAS])
    raw_tool = tool[0].splitlines()[0] if tool and tool[0] else ""
    name = normalise_tool(raw_tool, known_tools) if raw_tool else ""
    plan = Plan(ctx[0] if ctx else "", sub[0] if sub else "", name, raw_tool)
    if tool is None:
        plan.malformed, plan.reason = True, "no 'Tool Name:' field"
    elif sub is None or not plan.sub_goal:
        plan.malformed, plan.reason = True, "no 'Sub-Goal:' field"
    elif not name:
        plan.malformed, plan.reason = True, f"unknown tool {raw_tool!r}"
    return plan


_COMMAND = re.compile(r"(?:generated\s+)?command\s*:\s*", re.I)


def parse_command(text: str, tool: str) -> str:
    """The executor's tool input: after the last 'Command:' (else the whole reply), without
    a leading 'TOOL:' prefix; code keeps its lines, other tools take the first line."""
    matches = list(_COMMAND.finditer(text))
    m = matches[-1] if matches else None
    body = text[m.end() :] if m else text
    body = body.strip()
    body = re.sub(rf"^`*{re.escape(tool)}`*\s*:\s*", "", body, flags=re.I)
    if tool == "python_coder":
        return body.strip()
    body = body.strip("`").strip()
    return body.splitlines()[0].strip() if body else ""


_CONCLUSION = re.compile(r"conclusion\s*:?\s*\**\s*(stop|continue)", re.I)


def parse_verdict(text: str) -> str:
    """'STOP' or 'CONTINUE' from the verifier's reply; CONTINUE when unclear (paper default)."""
    found = _CONCLUSION.findall(text)
    if found:
        return found[-1].upper()
    words = re.findall(r"\b(STOP|CONTINUE)\b", text)
    return words[-1] if words else "CONTINUE"


_ANSWER = re.compile(r"answer\s*(?:is)?\s*:\s*(.*)", re.I)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def extract_answer(text: str) -> str:
    """The final answer: a \\boxed{} value, else the line after the last 'Answer:', else the
    reply's last non-empty line. One line only: listing candidates is graded as written."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    found = _ANSWER.findall(text)
    if found:
        return found[-1].strip().strip("*").strip()
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""
