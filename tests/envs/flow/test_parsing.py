"""Tolerant parsing of the roles' replies (plans, commands, verdicts, answers)."""

import pytest

from practicum.envs.flow.parsing import (
    extract_answer,
    normalise_tool,
    parse_command,
    parse_plan,
    parse_verdict,
)

TOOLS = ["python_coder", "calculator", "search", "lookup"]


def test_plan_with_the_three_fields():
    p = parse_plan(
        "Justification: hop one.\nContext: none\nSub-Goal: Find the founder of X.\n"
        "Tool Name: lookup",
        TOOLS,
    )
    assert (p.context, p.sub_goal, p.tool, p.malformed) == (
        "none",
        "Find the founder of X.",
        "lookup",
        False,
    )


@pytest.mark.parametrize(
    "text",
    [
        "**Context:** none\n**Sub-Goal:** compute 2+3\n**Tool Name:** `Calculator_Tool`",
        "context: none\nsub goal: compute 2+3\ntool_name: calculator.",
        "Context: none Sub_Goal: compute 2+3 Tool Name: the calculator tool",
    ],
)
def test_plan_fields_are_parsed_tolerantly(text):
    p = parse_plan(text, TOOLS)
    assert not p.malformed and p.tool == "calculator" and p.sub_goal.startswith("compute 2+3")


def test_the_last_occurrence_of_each_field_wins():
    p = parse_plan(
        "Context: a\nSub-Goal: old\nTool Name: search\nContext: b\nSub-Goal: new\n"
        "Tool Name: lookup",
        TOOLS,
    )
    assert (p.context, p.sub_goal, p.tool) == ("b", "new", "lookup")


@pytest.mark.parametrize(
    "text,reason",
    [
        ("I will compute it.", "no 'Tool Name:' field"),
        ("Context: x\nTool Name: lookup", "no 'Sub-Goal:' field"),
        ("Context: x\nSub-Goal: y\nTool Name: Google_Maps", "unknown tool 'Google_Maps'"),
    ],
)
def test_malformed_plans_are_flagged_with_a_reason(text, reason):
    p = parse_plan(text, TOOLS)
    assert p.malformed and p.reason == reason


def test_normalise_tool():
    assert normalise_tool("Python Coder", TOOLS) == "python_coder"
    assert normalise_tool("Lookup_Tool", TOOLS) == "lookup"
    assert normalise_tool("google", TOOLS) == ""


def test_commands():
    assert (
        parse_command("Sure.\nCommand: lookup: Velor Works | founder\nmore", "lookup")
        == "Velor Works | founder"
    )
    assert parse_command("Generated Command: `3 * 4`", "calculator") == "3 * 4"
    assert (
        parse_command("Command: ```python\nx = 2\nprint(x)\n```", "python_coder")
        == "```python\nx = 2\nprint(x)\n```"
    )


def test_verdict_defaults_to_continue():
    assert parse_verdict("The answer is known. Conclusion: STOP") == "STOP"
    assert parse_verdict("**Conclusion**: continue") == "CONTINUE"
    assert parse_verdict("I am not sure.") == "CONTINUE"


def test_answers():
    assert extract_answer("Reasoning...\nAnswer: 42") == "42"
    assert extract_answer("so \\boxed{7}") == "7"
    assert extract_answer("Torlo Works") == "Torlo Works"
    assert extract_answer("Answer: 3 or 4") == "3 or 4"  # graded as written: not a number


@pytest.mark.parametrize(
    "text",
    [
        # the memory's own step format: a line-initial Tool: stands for Tool Name:
        "Tool: lookup\nSub-Goal: Find the founder of Velor Works.\nCommand: Velor Works | founder",
        # a Command: line before the tool name no longer ends the reply (it is not a stop string)
        "Context: none\nSub-Goal: Find the founder of Velor Works.\nCommand: Velor Works | "
        "founder\nTool Name: lookup",
    ],
)
def test_plans_in_the_memory_format_parse(text):
    from practicum.envs.flow.prompts import PLANNER_STOPS

    assert not any(stop in text for stop in PLANNER_STOPS)
    p = parse_plan(text, ["lookup", "search"])
    assert not p.malformed and p.tool == "lookup"
    assert p.sub_goal == "Find the founder of Velor Works."  # the Command line is not in it


def test_a_tool_word_inside_a_field_is_not_a_tool_field():
    p = parse_plan("Context: use the search tool: it helps\nSub-Goal: find X", ["search"])
    assert p.malformed and p.reason == "no 'Tool Name:' field"
