"""The OpenAI API's shapes, shared by `practicum serve` (`app`) and the episode-scoped endpoint
outside agents call (`practicum.agent.endpoint`): request models, errors, choices as JSON and
as server-sent events, tool specs, prompts given as text or ids.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from practicum.engine.base import Sample
from practicum.engine.chat import untrusted_ids
from practicum.engine.continuous import ServerStopped
from practicum.serve import tools as T
from practicum.serve.stream import chat_logprobs

DEFAULT_CHAT_TOKENS = 512
"""max_tokens of a chat reply when the request gives none (capped by the context left)."""
DEFAULT_COMPLETION_TOKENS = 16
"""max_tokens of a completion when the request gives none (the OpenAI default)."""
ROLES = ("system", "developer", "user", "assistant", "tool")
DISCONNECT_POLL = 0.2
"""Seconds between checks that the client of a running request is still connected."""


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind


class BaseRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # clients send fields we do not use

    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=0)
    n: int = Field(1, ge=1, le=16)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class ChatRequest(BaseRequest):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False


class CompletionRequest(BaseRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=5)


@dataclass
class Choice:
    index: int
    text: str
    """The reply's text (content; for tool calls, the text before them)."""
    finish_reason: str
    tokens: int
    """Sampled tokens behind this choice (all field-filling calls included)."""
    sample: Sample
    calls: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0
    """Completions: where the sampled text starts in `text` (after an echoed prompt)."""


async def unless_disconnected(request: Request, work):
    """Await `work`; once the client has gone away, cancel it (its rows leave the batch at the
    next decode step)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL)
            if done:
                return task.result()
            if await request.is_disconnected():
                return Response(status_code=499)  # nobody reads it
    finally:
        task.cancel()


def check_roles(messages: list[dict]) -> None:
    for i, m in enumerate(messages):
        if m.get("role") not in ROLES:
            raise APIError(
                400,
                f"messages[{i}].role: unknown role {m.get('role')!r} (expected "
                f"one of {', '.join(ROLES)})",
                f"messages.{i}.role",
            )


def stop_list(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]


def include_usage(req: BaseRequest) -> bool:
    return bool((req.stream_options or {}).get("include_usage"))


def tool_specs(tools: list[dict]) -> dict[str, dict]:
    """function name -> its parameters schema."""
    out = {}
    for t in tools:
        f = t.get("function") or {}
        if t.get("type", "function") == "function" and isinstance(f.get("name"), str):
            out[f["name"]] = f.get("parameters") or {}
    if not out:
        raise APIError(400, "tools: no function definitions", "tools")
    return out


def tool_choice_mode(req: ChatRequest) -> tuple[str, str | None]:
    """("none" | "auto" | "forced", the forced function's name or None for any)."""
    choice = req.tool_choice
    if not req.tools or choice == "none":
        if isinstance(choice, dict) or choice == "required":
            raise APIError(400, "tool_choice needs tools", "tool_choice")
        return "none", None
    if choice is None or choice == "auto":
        return "auto", None
    if choice == "required":
        return "forced", None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if name not in tool_specs(req.tools):
            raise APIError(400, f"tool_choice names {name!r}, which is not in tools", "tool_choice")
        return "forced", name
    raise APIError(400, f"tool_choice: unknown value {choice!r}", "tool_choice")


def completion_prompts(prompt, chat, vocab_size: int) -> list[list[int]]:
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise APIError(400, "prompt is empty", "prompt")
    if all(isinstance(x, int) for x in prompt):
        prompt = [prompt]
    out = [chat.encode(p) if isinstance(p, str) else list(p) for p in prompt]
    if any(not p for p in out):
        raise APIError(400, "prompt is empty", "prompt")
    bad = next((t for p in out for t in p if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise APIError(
            400,
            f"prompt: token id {bad} is outside the vocabulary (0 to {vocab_size - 1})",
            "prompt",
        )
    return out


def usage_of(prompt_tokens: int, choices: list[Choice]) -> dict:
    completion = sum(c.tokens for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def openai_calls(c: Choice) -> list[dict]:
    return [
        {
            "id": T.call_id(),
            "type": "function",
            "function": {"name": k["name"], "arguments": json.dumps(k["arguments"])},
        }
        for k in c.calls
    ]


def chat_choice(c: Choice, logprobs: bool, tok) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": c.text or (None if c.calls else "")}
    if c.calls:
        msg["tool_calls"] = openai_calls(c)
    return {
        "index": c.index,
        "message": msg,
        "finish_reason": c.finish_reason,
        "logprobs": {
            "content": chat_logprobs(list(zip(c.sample.token_ids, c.sample.logprobs)), tok)
        }
        if logprobs
        else None,
    }


def text_pieces(text: str, tok) -> list[str]:
    """`text` cut at token boundaries, for streamed deltas."""
    ids = untrusted_ids(tok, text)
    out, prev = [], ""
    for k in range(1, len(ids) + 1):
        cur = tok.decode(ids[:k])
        if len(cur) > len(prev) and cur.startswith(prev) and not cur.endswith("\ufffd"):
            out.append(cur[len(prev) :])
            prev = cur
    if prev != text:
        out.append(text[len(prev) :] if text.startswith(prev) else text)
    return out


def sse(chunks) -> StreamingResponse:
    """Server-sent events of `chunks` (a generator or an async generator of dicts), then
    [DONE]; a request the engine fails mid-stream ends with an error event."""

    async def body():
        try:
            if hasattr(chunks, "__aiter__"):
                async for chunk in chunks:
                    yield f"data: {json.dumps(chunk)}\n\n"
            else:
                for chunk in chunks:
                    yield f"data: {json.dumps(chunk)}\n\n"
        except (ServerStopped, ValueError) as e:
            kind = "server_error" if isinstance(e, ServerStopped) else "invalid_request_error"
            yield f"data: {json.dumps({'error': {'message': str(e), 'type': kind}})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def chat_chunks(rid: str, now: int, req: ChatRequest, choices: list[Choice], usage: dict, tok):
    """The chunks of a reply with tools, sampled whole (its calls are parsed from the whole
    text); the usage in the last chunk, as in `practicum.serve.stream`."""

    def chunk(index: int, delta: dict, finish: str | None = None) -> dict:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": now,
            "model": req.model,
            "choices": [
                {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
            ],
        }

    for c in choices:
        yield chunk(c.index, {"role": "assistant", "content": ""})
        for piece in text_pieces(c.text, tok) if c.text else []:
            yield chunk(c.index, {"content": piece})
        for k, call in enumerate(openai_calls(c)):
            yield chunk(c.index, {"tool_calls": [{"index": k, **call}]})
        if c is not choices[-1]:
            yield chunk(c.index, {}, c.finish_reason)
    last = chunk(choices[-1].index, {}, choices[-1].finish_reason)
    if include_usage(req):
        yield from [last, {**last, "choices": [], "usage": usage}]
    else:
        yield {**last, "usage": usage}
