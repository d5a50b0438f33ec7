"""The OpenAI-compatible HTTP API over a `Served` engine (FastAPI).

    GET  /v1/models             the policy `<name>` and its frozen base `<name>-base`
    POST /v1/chat/completions   messages, tools + tool_choice, n, seed, stop, logprobs, stream
    POST /v1/completions        text or token-id prompts, echo, logprobs, stream
    GET  /health

Every request joins the run's `ContinuousServer`: rows join and leave the running batch at each
decode step (the policy with its adapter on, the base in its own batch with it off), so a short
request is not held up by a long one, and a client that goes away frees its rows at the next
step. A stream sends each token's text as it is sampled (`practicum.serve.stream`), the usage in
its last chunk; a reply with tools is streamed once its calls are parsed. `max_tokens` is capped
by the run's max_seq_len, by `serve --max-tokens` and by the context left after the prompt. With an API key, /v1
answers only requests that carry it as `Authorization: Bearer <key>` (as vLLM's `--api-key`).

Log-probs are the engine's behaviour log-probs: log-softmax at the sampling temperature (0 for
greedy). Tool calls follow `practicum.serve.tools`; a forced `tool_choice` starts the reply with
the call for the model and fills the arguments field by field when the model's own JSON does
not fit the function's schema.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from dataclasses import replace

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from practicum.engine.base import Sample, SamplingParams
from practicum.engine.continuous import ServerStopped
from practicum.serve import tools as T
from practicum.serve.loading import Served
from practicum.serve.protocol import (
    DEFAULT_CHAT_TOKENS,
    DEFAULT_COMPLETION_TOKENS,
    APIError,
    BaseRequest,
    ChatRequest,
    Choice,
    CompletionRequest,
    chat_choice,
    chat_chunks,
    check_roles,
    completion_prompts,
    guess_name,
    include_usage,
    sse,
    stop_list,
    tool_choice_mode,
    tool_specs,
    unless_disconnected,
    usage_of,
)
from practicum.serve.stream import (
    chat_stream,
    completion_logprobs,
    completion_stream,
    trim,
)

log = logging.getLogger(__name__)

def build_app(served: Served, api_key: str | None = None) -> FastAPI:
    """The API over `served` (module doc); with `api_key`, /v1 needs it as a Bearer token."""
    app = FastAPI(title="practicum serve", version="1")
    created = int(time.time())
    tok = served.tokenizer

    async def authorized(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
                key.strip().encode(), api_key.encode()):
            raise APIError(401, "invalid or missing API key (send Authorization: Bearer <key>)",
                           None, "authentication_error")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorized)])

    @app.exception_handler(APIError)
    async def _api_error(_req: Request, e: APIError):
        return JSONResponse(status_code=e.status, content={"error": {
            "message": e.message, "type": e.kind, "param": e.param, "code": None}})

    @app.exception_handler(ServerStopped)
    async def _stopped(_req: Request, e: ServerStopped):
        return JSONResponse(status_code=503, content={"error": {
            "message": str(e), "type": "server_error", "param": None, "code": None}})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, e: RequestValidationError):
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"] if x != "body")
        return JSONResponse(status_code=400, content={"error": {
            "message": f"{where}: {err['msg']}", "type": "invalid_request_error",
            "param": where, "code": None}})

    def model_card(name: str) -> dict:
        return {"id": name, "object": "model", "created": created, "owned_by": "practicum",
                "root": served.target.model,
                "parent": None if served.names[name] else served.target.name}

    @app.get("/health")
    async def health():
        return {"status": "ok", "policy_version": served.server.version,
                "usage": served.usage}

    @v1.get("/models")
    async def models():
        return {"object": "list", "data": [model_card(n) for n in served.names]}

    @v1.get("/models/{name}")
    async def model(name: str):
        adapter_for(name)
        return model_card(name)

    def adapter_for(name: str) -> bool:
        if name not in served.names:
            raise APIError(404, f"model {name!r} does not exist; this server has "
                           f"{', '.join(served.names)}", "model", "not_found_error")
        return served.names[name]

    def params_for(req: BaseRequest, prompt_len: int, default_tokens: int,
                   stop_ids: list[int] = ()) -> SamplingParams:
        """max_tokens (or the default) capped by the context left and `served.max_tokens`
        (the run's max_seq_len, `--max-tokens`)."""
        room = (served.context - prompt_len) if served.context else None
        if room is not None and room <= 0:
            raise APIError(400, f"the prompt has {prompt_len} tokens; this model's context is "
                           f"{served.context}", "messages")
        wanted = getattr(req, "max_completion_tokens", None) or req.max_tokens
        max_new = wanted if wanted is not None else default_tokens
        for cap in (room, served.max_tokens):
            if cap is not None:
                max_new = min(max_new, cap)
        temperature = 1.0 if req.temperature is None else req.temperature
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        return SamplingParams(temperature=temperature,
                              top_p=(req.top_p or 1.0) if temperature > 0 else 1.0,
                              max_new_tokens=max_new, stop_strings=tuple(s for s in stops if s),
                              stop_token_ids=tuple(stop_ids))

    async def generate(ids: list[int], params: SamplingParams, seed: int | None,
                       adapter: bool) -> Sample:
        try:
            return await served.generate(ids, params, seed, adapter)
        except ValueError as e:  # the engine's checks (e.g. prompt plus tokens too long)
            raise APIError(400, str(e)) from None

    def seed_of(req: BaseRequest, i: int) -> int | None:
        return None if req.seed is None else req.seed + i

    # -- chat ------------------------------------------------------------------------------------
    @v1.post("/chat/completions")
    async def chat_completions(req: ChatRequest, request: Request):
        return await unless_disconnected(request, chat(req))

    async def chat(req: ChatRequest):
        adapter = adapter_for(req.model)
        choice_mode, forced_name = tool_choice_mode(req)
        tools = req.tools if choice_mode != "none" else None
        check_roles(req.messages)
        try:
            ids = served.chat.render(T.tool_messages(req.messages, tools))
        except (KeyError, TypeError, ValueError) as e:
            raise APIError(400, f"messages: cannot render them ({e})", "messages") from None
        prefix = T.forced_prefix(forced_name) if choice_mode == "forced" else ""
        prompt = ids + served.chat.encode(prefix) if prefix else ids
        params = params_for(req, len(prompt), DEFAULT_CHAT_TOKENS, served.chat.stop_ids())
        if choice_mode == "forced" and forced_name is not None:
            params = replace(params, stop_strings=(*params.stop_strings, T.CALL_CLOSE))
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream and not tools:
            head = {"id": rid, "object": "chat.completion.chunk", "created": now,
                    "model": req.model}
            jobs = [(prompt, params, seed_of(req, i)) for i in range(req.n)]
            return sse(chat_stream(served, head, jobs, adapter, tuple(stop_list(req.stop)),
                                    req.logprobs, include_usage(req)))
        samples = await asyncio.gather(*(generate(prompt, params, seed_of(req, i), adapter)
                                         for i in range(req.n)))
        choices = []
        for i, s in enumerate(samples):
            text = trim(s.text, req.stop)
            c = Choice(i, text, s.finish_reason, len(s.token_ids), s)
            if tools:
                await _tool_calls(c, prefix, tools, choice_mode, forced_name, ids, params,
                                  seed_of(req, i), adapter)
            choices.append(c)
        usage = usage_of(len(prompt), choices)
        if req.stream:
            return sse(chat_chunks(rid, now, req, choices, usage, tok))
        return {"id": rid, "object": "chat.completion", "created": now, "model": req.model,
                "system_fingerprint": f"practicum-v{served.server.version}",
                "choices": [chat_choice(c, req.logprobs, tok) for c in choices],
                "usage": usage}

    async def _tool_calls(c: Choice, prefix: str, tools: list[dict], mode: str,
                          forced_name: str | None, ids: list[int],
                          params: SamplingParams, seed: int | None, adapter: bool) -> None:
        """Parse the choice's tool calls; under a forced tool_choice, make sure there is one."""
        specs = tool_specs(tools)
        content, calls = T.parse_tool_calls(prefix + c.text)
        calls = [k for k in calls if k["name"] in specs
                 and T.check_arguments(k["arguments"], specs[k["name"]]) is None]
        if mode == "forced" and not calls:
            name = forced_name or guess_name(prefix + c.text, specs)
            args, extra = await _fill(name, specs[name], ids, params, seed, adapter)
            calls, content, c.tokens = [{"name": name, "arguments": args}], "", c.tokens + extra
        if calls:
            c.calls, c.text, c.finish_reason = calls, content, "tool_calls"

    async def _fill(name: str, schema: dict, ids: list[int], params: SamplingParams,
                    seed: int | None, adapter: bool) -> tuple[dict, int]:
        """The call's arguments, written by the model field by field (`T.fill_arguments`)."""
        return await T.fill_arguments(name, schema, ids, params, served.chat.encode,
                                      lambda p_ids, p: generate(p_ids, p, seed, adapter))

    # -- completions -----------------------------------------------------------------------------
    @v1.post("/completions")
    async def completions(req: CompletionRequest, request: Request):
        return await unless_disconnected(request, complete(req))

    async def complete(req: CompletionRequest):
        adapter = adapter_for(req.model)
        prompts = completion_prompts(req.prompt, served.chat, served.vocab_size)
        jobs = [(ids, params_for(req, len(ids), DEFAULT_COMPLETION_TOKENS), seed_of(req, i))
                for ids in prompts for i in range(req.n)]
        echoes = [tok.decode(ids, skip_special_tokens=False) if req.echo else ""
                  for ids, _, _ in jobs]
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        prompt_tokens = sum(len(p) for p in prompts)
        if req.stream:
            head = {"id": rid, "object": "text_completion", "created": now, "model": req.model}
            return sse(completion_stream(served, head, jobs, echoes, adapter,
                                          tuple(stop_list(req.stop)), req.logprobs is not None,
                                          include_usage(req), prompt_tokens))
        samples = await asyncio.gather(*(generate(*job, adapter) for job in jobs))
        choices = [Choice(k, echoes[k] + trim(s.text, req.stop), s.finish_reason,
                           len(s.token_ids), s, offset=len(echoes[k]))
                   for k, s in enumerate(samples)]
        body = [{"index": c.index, "text": c.text, "finish_reason": c.finish_reason,
                 "logprobs": completion_logprobs(c.sample.token_ids, c.sample.logprobs, tok,
                                                 c.offset) if req.logprobs is not None
                 else None} for c in choices]
        return {"id": rid, "object": "text_completion", "created": now, "model": req.model,
                "system_fingerprint": f"practicum-v{served.server.version}",
                "choices": body, "usage": usage_of(prompt_tokens, choices)}

    app.include_router(v1)
    return app


