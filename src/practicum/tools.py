"""One tool layer for every agent that calls tools (swe, flow, serve): a tool set maps each
tool's name to how its call's arguments are parsed and how it runs, with the Lark rule
(llguidance syntax, `practicum.engine.constraint`) its calls must match.

    tools = ToolSet([Bash(...), View(...), Submit()])
    call = TagSyntax(tools.names).parse(reply)   # Call("bash", "ls"); CallError when none fits
    result = tools.run(call.tool, call.body)     # ToolResult; bad arguments -> an error result
    lark = tools.grammar(*shared_rules)          # "start: bash | view | submit" + each tool's rule

Two kinds of mistake reach the model differently: a reply with no usable call (`CallError`
from the syntax: the turn is malformed) and a call whose arguments its tool rejects (the tool's
`parse` raises `CallError`, `run` turns it into an error result the model reads). Both messages
are the corrective observation, so they say what to write instead.

Call syntaxes: `TagSyntax` (`<name>body</name>`, SWE-agent style) here; the Hermes JSON calls of
models served over the OpenAI API in `practicum.serve.tools`; AgentFlow's plans, which name a
tool for a frozen executor to call, in `practicum.envs.flow.parsing`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar


class CallError(ValueError):
    """A call the model wrote that cannot be run; the message is shown to it as-is."""


@dataclass(frozen=True)
class Call:
    tool: str
    body: Any
    """The call's arguments as written: text between tags, or a JSON object."""


@dataclass
class ToolResult:
    text: str
    """What the model reads (before any truncation)."""
    error: bool = False
    """The call failed (malformed arguments, bad path, command failed, nothing found)."""
    value: str = ""
    """The short answer-like part of the text (a number, an attribute), where a tool has one."""
    seconds: float = 0.0
    """Wall-clock seconds of the tool's real work."""


class Tool:
    """One tool: `parse` turns a call's body into arguments, `execute` runs them."""

    name: str = ""
    grammar: str = ""
    """Lark rule(s) of one call of this tool, named after it (`ToolSet.grammar` joins them)."""

    def parse(self, body: Any) -> Any:
        """The arguments in a call's body; `CallError` (one line, shown to the model) when they
        do not fit. Default: the body itself."""
        return body

    def execute(self, args: Any) -> ToolResult:
        raise NotImplementedError(f"the {self.name} tool is not run by the tool set")

    def run(self, body: Any) -> ToolResult:
        """Parse then execute; rejected arguments are an error result."""
        try:
            args = self.parse(body)
        except CallError as e:
            return ToolResult(str(e), error=True)
        return self.execute(args)


T = TypeVar("T", bound=Tool)


class ToolSet(Mapping[str, T], Generic[T]):
    """Tools by name, in the order they are offered."""

    def __init__(self, tools: Iterable[T]):
        self._tools = {t.name: t for t in tools}

    def __getitem__(self, name: str) -> T:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def parse(self, name: str, body: Any) -> Any:
        """The arguments of a call of `name`; `CallError` for an unknown tool or bad ones."""
        if name not in self._tools:
            raise CallError(f"unknown tool {name!r}; the tools are {', '.join(self._tools)}")
        return self._tools[name].parse(body)

    def run(self, name: str, body: Any) -> ToolResult:
        return self._tools[name].run(body)

    def grammar(self, *rules: str) -> str:
        """A reply that is exactly one call: `start` picks a tool, each tool's rule follows,
        then `rules` (the rules and terminals the tools' rules share)."""
        return call_grammar(self.values(), *rules)


def call_grammar(tools: Iterable[Tool | type[Tool]], *rules: str) -> str:
    """`ToolSet.grammar` over tools or tool classes (their rules are class attributes)."""
    tools = list(tools)
    return (
        "\n".join(
            [f"start: {' | '.join(t.name for t in tools)}", *(t.grammar for t in tools), *rules]
        )
        + "\n"
    )


class TagSyntax:
    """Calls written as `<name>body</name>`, or `<name/>` for the tools in `bare`. The first
    complete tag of a reply is the call (a thought before it is allowed); every closing tag is
    a stop string, and none is a prefix of its own opening tag. A blank body makes the reply
    malformed for the tools in `need_body`; the others get it to reject themselves. `help`
    ends every message about a malformed reply."""

    def __init__(
        self,
        names: Iterable[str],
        help: str,
        bare: Iterable[str] = (),
        need_body: Iterable[str] = (),
    ):
        self.names, self.help = list(names), help
        self.bare, self.need_body = list(bare), set(need_body)
        alternatives = "|".join(map(re.escape, self.names))
        bare = "|".join(map(re.escape, self.bare)) or "(?!)"  # (?!): never matches
        self._tag = re.compile(rf"<({alternatives})>(.*?)</\1>|<({bare})\s*/>", re.S)
        self._open = re.compile(rf"<({alternatives})\b")

    @property
    def stop_strings(self) -> list[str]:
        return [f"</{n}>" for n in self.names] + [f"<{n}/>" for n in self.bare]

    def parse(self, reply: str) -> Call:
        m = self._tag.search(reply)
        if m is None:
            opened = self._open.search(reply)
            if opened:
                raise CallError(
                    f"Your <{opened.group(1)}> was not closed with "
                    f"</{opened.group(1)}>. {self.help}"
                )
            raise CallError(f"No tool call found. {self.help}")
        if m.group(1) is None:
            return Call(m.group(3), "")
        tool, body = m.group(1), m.group(2)
        if tool in self.need_body and not body.strip():
            raise CallError(f"<{tool}> is empty. {self.help}")
        return Call(tool, body)
