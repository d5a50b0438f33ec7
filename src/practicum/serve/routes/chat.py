"""POST /v1/chat/completions: messages, tools + tool_choice, n, seed, stop, logprobs, stream.

A reply without tools streams token by token (`practicum.serve.stream`); one with tools is
sampled whole, its calls read by the tool layer (`practicum.serve.tools.reply_calls`), then
sent as chunks. A forced `tool_choice` starts the reply with the call for the model, and the
arguments are filled field by field when the model's own JSON does not fit the schema.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

from fastapi import APIRouter, Request

from practicum.engine.base import SamplingParams
from practicum.serve import tools as T
from practicum.serve.protocol import (
    DEFAULT_CHAT_TOKENS,
    APIError,
    ChatRequest,
    Choice,
    chat_choice,
    chat_chunks,
    check_roles,
    include_usage,
    sse,
    stop_list,
    tool_choice_mode,
    tool_specs,
    unless_disconnected,
    usage_of,
)
from practicum.serve.state import ServeState, seed_of, state_of
from practicum.serve.stream import chat_stream, trim
from practicum.tools import ToolSet

router = APIRouter()


@router.post("/chat/completions")
async def chat_completions(req: ChatRequest, request: Request):
    return await unless_disconnected(request, chat(state_of(request), req))


async def chat(state: ServeState, req: ChatRequest):
    served = state.served
    adapter = state.adapter_for(req.model)
    choice_mode, forced_name = tool_choice_mode(req)
    tools = req.tools if choice_mode != "none" else None
    check_roles(req.messages)
    try:
        ids = served.chat.render(T.tool_messages(req.messages, tools))
    except (KeyError, TypeError, ValueError) as e:
        raise APIError(400, f"messages: cannot render them ({e})", "messages") from None
    prefix = T.forced_prefix(forced_name) if choice_mode == "forced" else ""
    prompt = ids + served.chat.encode(prefix) if prefix else ids
    params = state.params_for(req, len(prompt), DEFAULT_CHAT_TOKENS, served.chat.stop_ids())
    if choice_mode == "forced" and forced_name is not None:
        params = replace(params, stop_strings=(*params.stop_strings, T.CALL_CLOSE))
    rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if req.stream and not tools:
        head = {"id": rid, "object": "chat.completion.chunk", "created": now, "model": req.model}
        jobs = [(prompt, params, seed_of(req, i)) for i in range(req.n)]
        return sse(
            chat_stream(
                served,
                head,
                jobs,
                adapter,
                tuple(stop_list(req.stop)),
                req.logprobs,
                include_usage(req),
            )
        )
    samples = await asyncio.gather(
        *(state.generate(prompt, params, seed_of(req, i), adapter) for i in range(req.n))
    )
    functions = T.function_tools(tool_specs(tools)) if tools else None
    choices = []
    for i, s in enumerate(samples):
        c = Choice(i, trim(s.text, req.stop), s.finish_reason, len(s.token_ids), s)
        if functions is not None:
            await _read_calls(
                state,
                c,
                prefix,
                functions,
                choice_mode == "forced",
                forced_name,
                ids,
                params,
                seed_of(req, i),
                adapter,
            )
        choices.append(c)
    usage = usage_of(len(prompt), choices)
    if req.stream:
        return sse(chat_chunks(rid, now, req, choices, usage, state.tok))
    return {
        "id": rid,
        "object": "chat.completion",
        "created": now,
        "model": req.model,
        "system_fingerprint": f"practicum-v{served.server.version}",
        "choices": [chat_choice(c, req.logprobs, state.tok) for c in choices],
        "usage": usage,
    }


async def _read_calls(
    state: ServeState,
    c: Choice,
    prefix: str,
    tools: ToolSet[T.FunctionTool],
    forced: bool,
    forced_name: str | None,
    ids: list[int],
    params: SamplingParams,
    seed: int | None,
    adapter: bool,
) -> None:
    """The choice's tool calls (`T.reply_calls`); a forced call's filled arguments are
    written by the model after the prompt `ids`, their tokens counted in the choice's."""

    async def fill(name: str, schema: dict) -> tuple[dict, int]:
        return await T.fill_arguments(
            name,
            schema,
            ids,
            params,
            state.served.chat.encode,
            lambda p_ids, p: state.generate(p_ids, p, seed, adapter),
        )

    content, calls, filled = await T.reply_calls(prefix + c.text, tools, forced, forced_name, fill)
    if filled is not None:
        c.tokens += filled
    if calls:
        c.calls, c.text, c.finish_reason = calls, content, "tool_calls"
