"""POST /v1/completions: text or token-id prompts, n, echo, logprobs, stream."""

from __future__ import annotations

import asyncio
import time
import uuid

from fastapi import APIRouter, Request

from practicum.serve.protocol import (
    DEFAULT_COMPLETION_TOKENS,
    Choice,
    CompletionRequest,
    completion_prompts,
    include_usage,
    sse,
    stop_list,
    unless_disconnected,
    usage_of,
)
from practicum.serve.state import ServeState, seed_of, state_of
from practicum.serve.stream import completion_logprobs, completion_stream, trim

router = APIRouter()


@router.post("/completions")
async def completions(req: CompletionRequest, request: Request):
    return await unless_disconnected(request, complete(state_of(request), req))


async def complete(state: ServeState, req: CompletionRequest):
    served, tok = state.served, state.tok
    adapter = state.adapter_for(req.model)
    prompts = completion_prompts(req.prompt, served.chat, served.vocab_size)
    jobs = [
        (ids, state.params_for(req, len(ids), DEFAULT_COMPLETION_TOKENS), seed_of(req, i))
        for ids in prompts
        for i in range(req.n)
    ]
    echoes = [tok.decode(ids, skip_special_tokens=False) if req.echo else "" for ids, _, _ in jobs]
    rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    prompt_tokens = sum(len(p) for p in prompts)
    if req.stream:
        head = {"id": rid, "object": "text_completion", "created": now, "model": req.model}
        return sse(
            completion_stream(
                served,
                head,
                jobs,
                echoes,
                adapter,
                tuple(stop_list(req.stop)),
                req.logprobs is not None,
                include_usage(req),
                prompt_tokens,
            )
        )
    samples = await asyncio.gather(*(state.generate(*job, adapter) for job in jobs))
    choices = [
        Choice(
            k,
            echoes[k] + trim(s.text, req.stop),
            s.finish_reason,
            len(s.token_ids),
            s,
            offset=len(echoes[k]),
        )
        for k, s in enumerate(samples)
    ]
    body = [
        {
            "index": c.index,
            "text": c.text,
            "finish_reason": c.finish_reason,
            "logprobs": completion_logprobs(c.sample.token_ids, c.sample.logprobs, tok, c.offset)
            if req.logprobs is not None
            else None,
        }
        for c in choices
    ]
    return {
        "id": rid,
        "object": "text_completion",
        "created": now,
        "model": req.model,
        "system_fingerprint": f"practicum-v{served.server.version}",
        "choices": body,
        "usage": usage_of(prompt_tokens, choices),
    }
