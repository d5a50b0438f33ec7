"""The planner's output grammar (llguidance Lark syntax, set on `Start`/`StepResult.grammar`).

AgentFlow's planner must end with `Context:`, `Sub-Goal:` and `Tool Name:` (arXiv 2510.05592,
`extract_context_subgoal_and_tool`); a 135M planner drifts into prose or the memory's own
format instead. Under this grammar the reply is exactly those three lines, each field one line
of bounded length (a run-on field would otherwise eat the turn's token budget) and the tool
name one of the episode's tools. The sampler that honours `grammar` is the engine's (issue 23);
without it the same text is still parsed tolerantly by `parsing.parse_plan`.
"""

from __future__ import annotations

import json


def lark_literal(text: str) -> str:
    """`text` as a Lark string literal (JSON escaping is valid Lark escaping)."""
    return json.dumps(text)


def planner_grammar(tools: list[str], field_chars: int = 100, field_tokens: int = 24) -> str:
    """Three lines: Context, Sub-Goal (each 1..field_chars characters and at most field_tokens
    tokens, no newline), Tool Name (one of `tools`). Two capped fields and the fixed text fit
    a 64-token turn."""
    if not tools:
        raise ValueError("the planner grammar needs at least one tool")
    names = " | ".join(lark_literal(t) for t in tools)
    return (
        f'start: "Context: " context "\\nSub-Goal: " sub_goal "\\nTool Name: " TOOL\n'
        f"context[max_tokens={field_tokens}]: FIELD\n"
        f"sub_goal[max_tokens={field_tokens}]: FIELD\n"
        f"FIELD: /[^\\n]{{1,{field_chars}}}/\n"
        f"TOOL: {names}\n"
    )
