"""Tool calls in text: rendering the tools into the prompt, parsing the model's calls back, and
the per-field parsing a forced call falls back to."""

import json

from practicum.serve import tools as T

REVIEW = {
    "type": "object",
    "properties": {
        "is_bug": {"type": "boolean"},
        "summary": {"type": "string"},
        "metric": {"type": ["number", "null"]},
        "lower_is_better": {"type": "boolean"},
    },
    "required": ["is_bug", "summary", "metric", "lower_is_better"],
}


def test_calls_are_parsed_with_the_text_before_them_as_content():
    text = (
        'Let me check.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n'
        '</tool_call>\n<tool_call>{"name": "bash", "arguments": "{\\"cmd\\": \\"pwd\\"}"}'
        "</tool_call>"
    )
    content, calls = T.parse_tool_calls(text)
    assert content == "Let me check."
    assert calls == [
        {"name": "bash", "arguments": {"cmd": "ls"}},
        {"name": "bash", "arguments": {"cmd": "pwd"}},
    ]


def test_malformed_blocks_are_dropped_and_an_unclosed_complete_call_counts():
    content, calls = T.parse_tool_calls(
        '<tool_call>{"name": 3}</tool_call><tool_call>{oops'
        '</tool_call><tool_call>{"name": "f", "arguments": '
        '{"x": 1}} trailing'
    )
    assert content == "" and calls == [{"name": "f", "arguments": {"x": 1}}]
    assert T.parse_tool_calls("no calls here") == ("no calls here", [])


def test_tools_go_into_the_system_message_and_tool_turns_become_user_turns():
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    msgs = T.tool_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "list"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        ],
        tools,
    )
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"].startswith("Be brief.\n\n# Tools")
    assert json.dumps(tools[0]) in msgs[0]["content"]
    assert msgs[1]["content"] == "list"
    assert T.parse_tool_calls(msgs[2]["content"])[1] == [
        {"name": "bash", "arguments": {"cmd": "ls"}}
    ]
    assert msgs[3]["content"] == "<tool_response>\na.py\n</tool_response>"


def test_forced_prefix_parses_once_the_model_completes_it():
    prefix = T.forced_prefix("submit_review")
    _, calls = T.parse_tool_calls(prefix + '{"is_bug": true}}\n</tool_call>')
    assert calls == [{"name": "submit_review", "arguments": {"is_bug": True}}]


def test_arguments_are_checked_against_the_schema():
    good = {"is_bug": False, "summary": "ok", "metric": 0.5, "lower_is_better": True}
    assert T.check_arguments(good, REVIEW) is None
    assert T.check_arguments({**good, "metric": None}, REVIEW) is None
    assert "missing" in T.check_arguments({"is_bug": False}, REVIEW)
    assert "boolean" in T.check_arguments({**good, "is_bug": "no"}, REVIEW)
    assert "not a JSON object" in T.check_arguments([1], REVIEW)
    assert T.check_arguments({"n": 2.5}, {"properties": {"n": {"type": "integer"}}}) is not None
    assert T.check_arguments({"n": True}, {"properties": {"n": {"type": "number"}}}) is not None
    assert T.check_arguments({"c": "z"}, {"properties": {"c": {"enum": ["a", "b"]}}}) is not None


def test_fields_parse_by_type_and_fall_back_to_their_default():
    assert T.parse_field(" true,", {"type": "boolean"}) == (True, True)
    assert T.parse_field("False}", {"type": "boolean"}) == (True, False)
    assert T.parse_field(" maybe", {"type": "boolean"})[0] is False
    assert T.parse_field(" 0.125, ", {"type": ["number", "null"]}) == (True, 0.125)
    assert T.parse_field(" -3", {"type": "integer"}) == (True, -3)
    assert T.parse_field(" 2.5", {"type": "integer"})[0] is False
    assert T.parse_field('the \\"best\\" run"', {"type": "string"}) == (True, "the \\")
    assert T.parse_field('fast", "x"', {"type": "string", "enum": ["fast", "slow"]}) == (
        True,
        "fast",
    )
    assert T.parse_field(" [1, 2]", {"type": "array"}) == (True, [1, 2])
    assert T.fallback_value({"type": "boolean"}) is False
    assert T.fallback_value({"type": "string", "default": "n/a"}) == "n/a"
    assert T.fallback_value({"enum": ["x", "y"]}) == "x"
    prefix = (
        T.forced_prefix("f")
        + T.field_prefix("a", "string", True)
        + 'hi"'
        + T.field_prefix("b", "number", False)
        + "1"
    )
    assert T.parse_tool_calls(prefix + "}}")[1] == [{"name": "f", "arguments": {"a": "hi", "b": 1}}]


def test_reply_calls_keep_calls_that_fit_and_fill_a_forced_one():
    import asyncio

    tools = T.function_tools({"submit_review": REVIEW, "note": {}})
    good = {"is_bug": False, "summary": "ok", "metric": 1, "lower_is_better": True}
    text = (
        "Done.\n"
        + T.format_call("submit_review", good)
        + T.format_call("submit_review", {"is_bug": "no"})
        + T.format_call("rm", {})
    )
    asked = []

    async def fill(name, schema):
        asked.append((name, schema))
        return {"is_bug": True}, 7

    assert asyncio.run(T.reply_calls(text, tools, True, None, fill)) == (
        "Done.",
        [{"name": "submit_review", "arguments": good}],
        None,
    )
    content, calls, tokens = asyncio.run(
        T.reply_calls(T.forced_prefix(None) + "sub", tools, True, None, fill)
    )
    assert (content, calls, tokens) == (
        "",
        [{"name": "submit_review", "arguments": {"is_bug": True}}],
        7,
    )
    assert asked == [("submit_review", REVIEW)]  # the name the model began to write
