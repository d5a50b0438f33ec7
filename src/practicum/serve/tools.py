"""Tool calls for models whose chat template knows no tools: described in the system prompt,
written by the model as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (the Hermes /
Qwen convention), parsed back into OpenAI `tool_calls`. The client's functions are a
`practicum.tools.ToolSet` of `FunctionTool`s: the client runs them, the set checks their calls.

    messages = tool_messages(messages, tools)          # tools described, tool turns rendered
    content, calls = parse_tool_calls(text)            # free text before the calls, the calls
    prefix = forced_prefix("submit_review")            # tool_choice naming a function: the reply
                                                       # is started for the model, which writes
                                                       # the arguments
    check_arguments(args, schema)                      # None, or what is wrong with them
    content, calls, filled = await reply_calls(prefix + text, function_tools(specs), ...)

Under a forced call whose arguments the model left unusable, `reply_calls` has them filled one
field at a time (`fill_arguments`: each value written by the model after a prefix naming it).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import replace
from typing import Any, Awaitable, Callable

from practicum.tools import CallError, Tool, ToolSet

log = logging.getLogger(__name__)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

SYSTEM_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def content_text(content: Any) -> str:
    """OpenAI message content (a string, None, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def tool_messages(messages: list[dict], tools: list[dict] | None) -> list[dict[str, str]]:
    """Chat messages with plain string contents for `ChatFormat.render`: the tools described in
    the system message, assistant tool calls written out as the model writes them, and tool
    results as user turns (the form an environment's observation takes)."""
    out: list[dict[str, str]] = []
    for m in messages:
        role, text = m["role"], content_text(m.get("content"))
        if role == "developer":
            role = "system"
        if role == "assistant" and m.get("tool_calls"):
            calls = [
                format_call(c["function"]["name"], _arguments(c["function"]))
                for c in m["tool_calls"]
            ]
            text = "\n".join([text, *calls] if text else calls)
        elif role == "tool":
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        out.append({"role": role, "content": text})
    if tools:
        spec = SYSTEM_TOOLS.format(tools="\n".join(json.dumps(t) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{spec}"}
        else:
            out.insert(0, {"role": "system", "content": spec})
    return out


def _arguments(function: dict) -> Any:
    args = function.get("arguments") or "{}"
    try:
        return json.loads(args) if isinstance(args, str) else args
    except json.JSONDecodeError:
        return args


def format_call(name: str, arguments: Any) -> str:
    return f"{CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{CALL_CLOSE}"


def forced_prefix(name: str | None) -> str:
    """The start of a reply that must call `name` (any tool when None); the model continues."""
    if name is None:
        return f'{CALL_OPEN}\n{{"name": "'
    return f'{CALL_OPEN}\n{{"name": {json.dumps(name)}, "arguments": '


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """(text before the first call, the calls) from a reply. Each call is {"name", "arguments"}
    with arguments a dict; a call block that is not a JSON object with a string name is left
    out (it stays in nothing: the content ends where the first call block starts). An unclosed
    last block counts when its JSON is complete (a reply cut by a stop string or length)."""
    start = text.find(CALL_OPEN)
    if start < 0:
        return text, []
    content, calls = text[:start].strip(), []
    decoder = json.JSONDecoder()
    for block in text[start:].split(CALL_OPEN)[1:]:
        body = block.split(CALL_CLOSE)[0].strip()
        try:
            obj, _end = decoder.raw_decode(body)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if isinstance(args, dict):
            calls.append({"name": obj["name"], "arguments": args})
    return content, calls


_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}


def check_arguments(args: Any, schema: dict | None) -> str | None:
    """None when `args` has every required property of a JSON-schema object with the right
    top-level types (and enum values); else what is wrong. Nested schemas are not checked."""
    if not isinstance(args, dict):
        return "arguments are not a JSON object"
    schema = schema or {}
    props = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in args:
            return f"missing required argument {key!r}"
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            continue
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {key!r} is not one of {spec['enum']}"
        if not _has_type(value, spec.get("type")):
            return f"argument {key!r} is not of type {spec.get('type')}"
    return None


def _has_type(value: Any, kind: str | list | None) -> bool:
    if kind is None:
        return True
    if isinstance(kind, list):
        return any(_has_type(value, k) for k in kind)
    if kind in ("number", "integer"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok and (kind == "number" or float(value).is_integer())
    return isinstance(value, _TYPES.get(kind, object))


def field_prefix(key: str, kind: str | None, first: bool) -> str:
    """What precedes a field's value inside the arguments object being filled."""
    return ("{" if first else ", ") + json.dumps(key) + ": " + ('"' if kind == "string" else "")


FIELD_STOPS = {"string": ('"',), None: (",", "}", "\n")}


def parse_field(text: str, spec: dict) -> tuple[bool, Any]:
    """(ok, value) from the model's text for one field of type spec["type"] (after
    `field_prefix`); a string field's text ends at its closing quote."""
    kind = spec.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    raw = text.strip()
    if kind == "string":
        value = text.split('"')[0]
        try:
            value = json.loads(f'"{value}"')
        except json.JSONDecodeError:
            pass
        return ("enum" not in spec or value in spec["enum"]), value
    if kind == "boolean":
        word = re.match(r"[A-Za-z]+", raw)
        word = word.group(0).lower() if word else ""
        return (word in ("true", "false")), word == "true"
    if kind in ("number", "integer"):
        m = re.match(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", raw)
        if not m:
            return False, None
        literal = m.group(0)
        if kind == "integer" or re.fullmatch(r"-?\d+", literal):
            return float(literal).is_integer(), int(float(literal))
        return True, float(literal)
    try:
        value, _ = json.JSONDecoder().raw_decode(raw)
    except json.JSONDecodeError:
        return False, None
    ok = _has_type(value, kind) and ("enum" not in spec or value in spec["enum"])
    return ok, value


def fallback_value(spec: dict) -> Any:
    """A field's value when the model wrote nothing usable for it: its schema default, else
    the first enum value, else the type's empty value."""
    if "default" in spec:
        return spec["default"]
    if spec.get("enum"):
        return spec["enum"][0]
    kind = spec.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    return {
        "string": "",
        "boolean": False,
        "number": 0,
        "integer": 0,
        "array": [],
        "object": {},
    }.get(kind)


async def fill_arguments(
    name: str,
    schema: dict,
    ids: list[int],
    params,
    encode: Callable[[str], list[int]],
    sample: Callable[[list[int], Any], Awaitable[Any]],
) -> tuple[dict, int]:
    """A forced call's arguments, one required field at a time, each value written by the model
    (`sample(prompt_ids, params)`, an engine call) after a prefix naming it (`encode`d after the
    prompt `ids`); a value that does not parse becomes the field's fallback. Returns the
    arguments and the number of tokens sampled."""
    props = schema.get("properties", {})
    keys = list(schema.get("required", [])) or list(props)
    text, args, tokens = forced_prefix(name), {}, 0
    for i, key in enumerate(keys):
        spec = props.get(key, {})
        kind = spec.get("type")
        kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
        text += field_prefix(key, kind, first=i == 0)
        budget = max(16, params.max_new_tokens // len(keys)) if kind == "string" else 16
        p = replace(
            params,
            stop_strings=FIELD_STOPS.get(kind, FIELD_STOPS[None]),
            max_new_tokens=min(params.max_new_tokens, budget),
        )
        s = await sample(ids + encode(text), p)
        tokens += len(s.token_ids)
        ok, value = parse_field(s.text, spec)
        if not ok:
            log.info(
                "tool %s: the model's value for %r did not parse (%r); using the field's fallback",
                name,
                key,
                s.text[:80],
            )
            value = fallback_value(spec)
        args[key] = value
        dumped = json.dumps(value)
        text += dumped[1:] if kind == "string" and isinstance(value, str) else dumped
    return args, tokens


class FunctionTool(Tool):
    """A function of the request's `tools`: the client runs it; a call's arguments must fit its
    parameters schema (`check_arguments`)."""

    def __init__(self, name: str, schema: dict):
        self.name, self.schema = name, schema

    def parse(self, arguments: Any) -> dict:
        problem = check_arguments(arguments, self.schema)
        if problem is not None:
            raise CallError(problem)
        return arguments


def function_tools(specs: dict[str, dict]) -> ToolSet[FunctionTool]:
    """The request's functions (name -> parameters schema) as a tool set."""
    return ToolSet(FunctionTool(name, schema) for name, schema in specs.items())


def guess_name(text: str, tools: ToolSet) -> str:
    """Under tool_choice=required: the function whose name the model began to write, else the
    first one."""
    written = text.split('"name": "', 1)[-1].split('"', 1)[0]
    for name in tools:
        if written and (name.startswith(written) or written.startswith(name)):
            return name
    return next(iter(tools))


async def reply_calls(
    text: str,
    tools: ToolSet[FunctionTool],
    forced: bool,
    forced_name: str | None,
    fill: Callable[[str, dict], Awaitable[tuple[dict, int]]],
) -> tuple[str, list[dict[str, Any]], int | None]:
    """(content, calls, tokens sampled to fill a call or None) of a reply's `text` (with its
    forced prefix): calls of functions not in `tools`, or with arguments their schema rejects,
    are dropped. Under a forced tool_choice with no call left, the named function (else the
    one the model began to write) is called with the arguments `fill(name, schema)` writes."""
    content, calls = parse_tool_calls(text)
    calls = [k for k in calls if _accepted(tools, k)]
    if forced and not calls:
        name = forced_name or guess_name(text, tools)
        args, tokens = await fill(name, tools[name].schema)
        return "", [{"name": name, "arguments": args}], tokens
    return content, calls, None


def _accepted(tools: ToolSet, call: dict[str, Any]) -> bool:
    try:
        tools.parse(call["name"], call["arguments"])
    except CallError:
        return False
    return True


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
