"""The shared tool layer: a tool set parses, runs and describes its tools' calls."""

import pytest

from practicum.engine.constraint import compiled
from practicum.tools import CallError, TagSyntax, Tool, ToolResult, ToolSet


class Echo(Tool):
    name = "echo"
    grammar = 'echo: "<echo>" TEXT "</echo>"'

    def parse(self, body: str) -> str:
        if "\n" in body:
            raise CallError("<echo> takes one line.")
        return body.upper()

    def execute(self, text: str) -> ToolResult:
        return ToolResult(text, value=text)


class Done(Tool):
    name = "done"
    grammar = 'done: "<done></done>"'


TOOLS = ToolSet([Echo(), Done()])
TAGS = TagSyntax(
    TOOLS.names, "Use <echo>text</echo> or <done/>.", bare=["done"], need_body=["echo"]
)


def test_a_call_is_parsed_then_run_and_rejected_arguments_are_an_error_result():
    call = TAGS.parse("thinking... <echo>hi</echo> <done/>")
    assert (call.tool, call.body) == ("echo", "hi")
    assert TOOLS.run(call.tool, call.body) == ToolResult("HI", value="HI")
    assert TOOLS.run("echo", "a\nb") == ToolResult("<echo> takes one line.", error=True)
    with pytest.raises(CallError, match="unknown tool 'rm'; the tools are echo, done"):
        TOOLS.parse("rm", "-rf /")


@pytest.mark.parametrize(
    "reply,message",
    [
        ("no call", "No tool call found. Use <echo>text</echo> or <done/>."),
        ("<echo>hi", "Your <echo> was not closed with </echo>. Use"),
        ("<echo> </echo>", "<echo> is empty. Use"),
    ],
)
def test_a_reply_without_a_usable_call_says_what_to_write(reply, message):
    with pytest.raises(CallError, match=message):
        TAGS.parse(reply)


def test_bare_tags_and_stop_strings():
    assert TAGS.parse("<done />").tool == "done"
    assert TAGS.stop_strings == ["</echo>", "</done>", "<done/>"]


def test_the_grammar_joins_each_tools_rule_and_compiles():
    lark = TOOLS.grammar("TEXT: /[a-z]{1,9}/")
    assert lark == (
        'start: echo | done\necho: "<echo>" TEXT "</echo>"\n'
        'done: "<done></done>"\nTEXT: /[a-z]{1,9}/\n'
    )
    assert compiled(lark)
