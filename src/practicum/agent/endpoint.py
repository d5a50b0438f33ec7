"""The episode-scoped OpenAI-compatible endpoint outside agents talk to (`rollout.agent`).

    endpoint = AgentEndpoint(server, chat, "calc", max_seq_len=2048, learner_temperature=1.0)
    endpoint.start()                               # uvicorn on a Unix socket (endpoint.socket)
    live = endpoint.open(limits, seed=7)           # live.key: this episode's secret
    ... the agent calls POST /v1/chat/completions with Authorization: Bearer <live.key> ...
    endpoint.close(live)                           # the key stops working; live.calls: the turns
    endpoint.stop()

One server per run, one key per episode: a request without a live key is refused (401) before
anything else and recorded nowhere, so agents running side by side cannot write into each
other's episodes. Every call is sampled by the run's `GenerationServer` (the policy `<name>`,
or its frozen base `<name>-base`, served but not trained on), from the prompt
`practicum.agent.calls` builds (continuation spliced on the sampled ids), and recorded with
its behaviour log-probs and policy version. The request log (optional, JSON lines) is written
here, from what the engine was given and returned, apart from the episode's own record: the
exactness test compares the two.

Sampling: an agent's max_tokens is honoured up to the row's room and `max_call_tokens`. Its
temperature is honoured (`LiveEpisode.temperature` None) and the turn trained only when it is
the learner's (and top_p is 1: the learner cannot replay a nucleus); or the run's temperature
replaces it (recorded as asked). Tools follow `practicum.serve.tools`; a forced `tool_choice`
starts the reply with the call's opening (recorded as context, not trained on); when the
model's call does not parse, its arguments are filled field by field for the agent (as
`practicum serve` does) by engine calls that are logged but never trained on: the episode
keeps the model's own attempt, and its next call continues from that. n > 1 is refused (one
reply per call).

Refusals (a bad request, an unknown model, a history that cannot fit, more than `max_calls`
calls or `max_parallel` at once, the episode's token budget spent) answer 4xx and make the
episode a failure with that reason (`LiveEpisode.failure`); `LiveEpisode.ended` is set so the
runner can stop the agent early.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from practicum.agent.calls import ContextExceeded, EpisodeCalls, reply_key
from practicum.agent.live import CallLimits, LiveEpisode
from practicum.engine.base import Sample, SamplingParams, derive_seed
from practicum.engine.chat import ChatFormat
from practicum.engine.server import GenerationServer
from practicum.serve import tools as T
from practicum.serve.protocol import (
    DEFAULT_CHAT_TOKENS,
    APIError,
    ChatRequest,
    Choice,
    CompletionRequest,
    chat_choice,
    chat_chunks,
    check_roles,
    completion_prompts,
    sse,
    tool_choice_mode,
    tool_specs,
    unless_disconnected,
    usage_of,
)
from practicum.serve.stream import completion_logprobs, trim

log = logging.getLogger(__name__)


class AgentEndpoint:
    """The endpoint of one run (module doc)."""

    def __init__(
        self,
        server: GenerationServer,
        chat: ChatFormat,
        name: str,
        max_seq_len: int,
        learner_temperature: float,
        request_log: Path | None = None,
    ):
        self.server, self.chat, self.name = server, chat, name
        self.max_seq_len, self.learner_temperature = max_seq_len, learner_temperature
        self.request_log = request_log
        self._live: dict[bytes, LiveEpisode] = {}
        self._lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._dir: Path | None = None
        self._thread = None
        self.unauthorized = 0
        """Requests refused for their key (counted only: they belong to no episode)."""

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        if self._dir is None:
            raise RuntimeError("the agent endpoint is not started")
        return self._dir / "endpoint.sock"

    def start(self) -> AgentEndpoint:
        from practicum.serve.http import ServerThread

        self._dir = Path(tempfile.mkdtemp(prefix="practicum-agent-endpoint-"))
        self._dir.chmod(0o755)  # sandboxed agents run as other uids; the key guards each call
        self._thread = ServerThread(self.app(), uds=str(self.socket))
        try:
            self._thread.__enter__()
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.__exit__(None, None, None)
            self._thread = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def open(
        self,
        limits: CallLimits,
        seed: int,
        temperature: float | None = None,
        submit_pattern: str | None = None,
    ) -> LiveEpisode:
        """A new episode with its own secret key."""
        key = secrets.token_urlsafe(32)
        live = LiveEpisode(
            key,
            EpisodeCalls(self.chat, self.max_seq_len, limits.min_reply_tokens),
            limits,
            seed,
            temperature,
            submit_pattern=re.compile(submit_pattern) if submit_pattern else None,
        )
        with self._lock:
            self._live[_digest(key)] = live
        return live

    def close(self, live: LiveEpisode) -> None:
        """The key stops working; calls still running are not recorded."""
        with self._lock:
            self._live.pop(_digest(live.key), None)
            live.closed = True

    def live(self, key: str) -> LiveEpisode | None:
        with self._lock:
            return self._live.get(_digest(key))

    # -- the app --------------------------------------------------------------------------------
    def app(self) -> FastAPI:
        app = FastAPI(title="practicum agent endpoint", version="1")
        names = {self.name: True, f"{self.name}-base": False}
        created = int(time.time())
        endpoint = self

        @app.middleware("http")
        async def key_first(request: Request, call_next):
            """The key is checked before the body is read: a stranger learns nothing."""
            if request.url.path.startswith("/v1/"):
                scheme, _, key = request.headers.get("authorization", "").partition(" ")
                live = endpoint.live(key.strip()) if scheme.lower() == "bearer" else None
                if live is None:
                    endpoint.unauthorized += 1
                    return JSONResponse(
                        status_code=401,
                        content={
                            "error": {
                                "message": "invalid or missing API key (send Authorization: Bearer "
                                "<key>)",
                                "type": "authentication_error",
                                "param": None,
                                "code": None,
                            }
                        },
                    )
                request.state.live = live
            return await call_next(request)

        @app.exception_handler(APIError)
        async def _api_error(_req: Request, e: APIError):
            return JSONResponse(
                status_code=e.status,
                content={
                    "error": {"message": e.message, "type": e.kind, "param": e.param, "code": None}
                },
            )

        @app.exception_handler(RequestValidationError)
        async def _invalid(request: Request, e: RequestValidationError):
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"] if x != "body")
            message = f"{where}: {err['msg']}"
            live = getattr(request.state, "live", None)
            if live is not None:
                live.refuse(message)
            return JSONResponse(
                status_code=400,
                content={
                    "error": {
                        "message": message,
                        "type": "invalid_request_error",
                        "param": where,
                        "code": None,
                    }
                },
            )

        @app.get("/health")
        async def health():
            return {"status": "ok", "policy_version": self.server.version}

        v1 = APIRouter(prefix="/v1")

        @v1.get("/models")
        async def models():
            return {
                "object": "list",
                "data": [
                    {"id": n, "object": "model", "created": created, "owned_by": "practicum"}
                    for n in names
                ],
            }

        @v1.post("/chat/completions")
        async def chat_completions(req: ChatRequest, request: Request):
            live = request.state.live
            return await unless_disconnected(request, self._guarded(live, names, req, self._chat))

        @v1.post("/completions")
        async def completions(req: CompletionRequest, request: Request):
            live = request.state.live
            return await unless_disconnected(
                request, self._guarded(live, names, req, self._complete)
            )

        app.include_router(v1)
        return app

    async def _guarded(self, live: LiveEpisode, names: dict[str, bool], req, handler):
        """Admit the call under the episode's limits, run it; a refusal fails the episode."""
        try:
            live.admit()
        except APIError as e:
            live.refuse(e.message)
            raise
        try:
            if req.model not in names:
                raise APIError(
                    404,
                    f"model {req.model!r} does not exist; this endpoint has {', '.join(names)}",
                    "model",
                    "not_found_error",
                )
            if req.n != 1:
                raise APIError(400, "n must be 1: an episode records one reply per call", "n")
            return await handler(live, req, names[req.model])
        except APIError as e:
            live.refuse(e.message)
            raise
        finally:
            live.release()

    # -- sampling -------------------------------------------------------------------------------
    def _params(
        self, live: LiveEpisode, req, prompt_len: int, adapter: bool, default_tokens: int
    ) -> tuple[SamplingParams, bool, dict[str, Any]]:
        """(params, trained, what the agent asked) for one call (module doc)."""
        asked_t = 1.0 if req.temperature is None else req.temperature
        asked_p = req.top_p or 1.0
        if live.temperature is not None:
            t, top_p = live.temperature, 1.0
        else:
            t, top_p = asked_t, (asked_p if asked_t > 0 else 1.0)
        wanted = getattr(req, "max_completion_tokens", None) or req.max_tokens
        left = live.limits.max_episode_tokens - live.calls.sampled_tokens
        max_new = min(
            wanted or default_tokens,
            live.limits.max_call_tokens,
            self.max_seq_len - prompt_len,
            max(left, 1),
        )
        stops = [req.stop] if isinstance(req.stop, str) else [s for s in req.stop or [] if s]
        params = SamplingParams(
            temperature=t,
            top_p=top_p,
            max_new_tokens=max(max_new, 1),
            stop_strings=tuple(stops),
            stop_token_ids=tuple(self.chat.stop_ids()),
        )
        trained = adapter and t == self.learner_temperature and top_p == 1.0
        asked = {
            "temperature": asked_t,
            "top_p": asked_p,
            "max_tokens": wanted,
            "sampled_temperature": t,
            "model": "policy" if adapter else "base",
        }
        return params, trained, asked

    async def _sample(
        self,
        live: LiveEpisode,
        ids: list[int],
        params: SamplingParams,
        seed: int | None,
        adapter: bool,
    ) -> tuple[Sample, int]:
        seed = derive_seed(live.seed, live.admitted) if seed is None else seed
        future = self.server.submit(ids, params, seed, adapter)
        try:
            sample, version = await asyncio.wrap_future(future)
        except ValueError as e:  # the engine's own checks (e.g. too long)
            raise APIError(400, str(e)) from None
        self._log(live, ids, sample, version, adapter, params)
        return sample, version

    def _log(
        self,
        live: LiveEpisode,
        ids: list[int],
        sample: Sample,
        version: int,
        adapter: bool,
        params: SamplingParams,
    ) -> None:
        if self.request_log is None:
            return
        line = json.dumps(
            {
                "episode_id": live.episode_id,
                "adapter": adapter,
                "version": version,
                "temperature": params.temperature,
                "prompt_ids": ids,
                "sampled_ids": sample.token_ids,
                "logprobs": sample.logprobs,
            },
            separators=(",", ":"),
        )
        with self._log_lock, open(self.request_log, "a") as f:
            f.write(line + "\n")

    def _record(
        self, live: LiveEpisode, plan, sample: Sample, version: int, key, trained: bool, info: dict
    ) -> None:
        if live.closed:  # the agent is gone: nobody reads this reply
            live.late += 1
            live.calls.abort(plan)
            return
        live.calls.record(plan, sample, version, key, trained, info)
        if plan.adapter:
            live.last_reply = sample.text
            if live.submit_pattern is not None and live.submit_pattern.search(sample.text):
                live.submitted = True
                live.ended.set()

    # -- chat -----------------------------------------------------------------------------------
    async def _chat(self, live: LiveEpisode, req: ChatRequest, adapter: bool):
        mode, forced = tool_choice_mode(req)
        tools = req.tools if mode != "none" else None
        check_roles(req.messages)
        prefix_text = T.forced_prefix(forced) if mode == "forced" else ""
        prefix = self.chat.encode(prefix_text) if prefix_text else []
        try:
            plan = live.calls.plan(req.messages, tools, adapter, prefix)
        except ContextExceeded as e:
            raise APIError(400, str(e), "messages") from None
        except (KeyError, TypeError, ValueError) as e:
            raise APIError(400, f"messages: cannot render them ({e})", "messages") from None
        try:
            params, trained, asked = self._params(
                live, req, len(plan.prompt_ids), adapter, DEFAULT_CHAT_TOKENS
            )
            if mode == "forced" and forced is not None:
                params = replace(params, stop_strings=(*params.stop_strings, T.CALL_CLOSE))
            sample, version = await self._sample(live, plan.prompt_ids, params, req.seed, adapter)
        except BaseException:
            live.calls.abort(plan)
            raise
        text = trim(sample.text, req.stop)
        c = Choice(0, text, sample.finish_reason, len(sample.token_ids), sample)
        filled = False
        if tools:
            # a forced call the model got wrong is filled for the agent, never trained on
            prompt = plan.prompt_ids[: len(plan.prompt_ids) - len(prefix)]
            content, calls, tokens = await T.reply_calls(
                prefix_text + text,
                T.function_tools(tool_specs(tools)),
                mode == "forced",
                forced,
                lambda name, schema: self._fill(live, name, schema, prompt, params, adapter),
            )
            filled = tokens is not None
            if calls:
                c.calls, c.text, c.finish_reason = calls, content, "tool_calls"
        returned = c.text or (None if c.calls else "")
        self._record(
            live,
            plan,
            sample,
            version,
            reply_key(returned, c.calls),
            trained,
            {"call": asked, "tool_calls": len(c.calls), "filled": filled},
        )
        usage = usage_of(len(plan.prompt_ids), [c])
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            return sse(chat_chunks(rid, now, req, [c], usage, self.chat.tokenizer))
        return {
            "id": rid,
            "object": "chat.completion",
            "created": now,
            "model": req.model,
            "system_fingerprint": f"practicum-v{version}",
            "choices": [chat_choice(c, req.logprobs, self.chat.tokenizer)],
            "usage": usage,
        }

    async def _fill(
        self,
        live: LiveEpisode,
        name: str,
        schema: dict,
        ids: list[int],
        params: SamplingParams,
        adapter: bool,
    ) -> tuple[dict, int]:
        """A forced call's arguments when the model's own did not parse: one required field at
        a time, each value sampled after a prefix naming it, a value that does not parse
        replaced by the field's fallback (as `practicum serve` does). These engine calls are in
        the request log but not in the episode: the reply they make was not sampled as one, so
        the episode keeps the model's own attempt (its next call continues from that)."""

        async def sample(prompt_ids: list[int], p: SamplingParams):
            return (await self._sample(live, prompt_ids, p, None, adapter))[0]

        return await T.fill_arguments(name, schema, ids, params, self.chat.encode, sample)

    # -- completions ----------------------------------------------------------------------------
    async def _complete(self, live: LiveEpisode, req: CompletionRequest, adapter: bool):
        if req.stream:
            raise APIError(400, "stream: completions are not streamed here (chat is)", "stream")
        prompts = completion_prompts(req.prompt, self.chat, len(self.chat.tokenizer))
        if len(prompts) != 1:
            raise APIError(
                400, "prompt: one prompt per call (an episode records one reply per call)", "prompt"
            )
        ids = prompts[0]
        try:
            plan = live.calls.plan_ids(ids, adapter)
        except ContextExceeded as e:
            raise APIError(400, str(e), "prompt") from None
        try:
            params, trained, asked = self._params(live, req, len(plan.prompt_ids), adapter, 16)
            sample, version = await self._sample(live, plan.prompt_ids, params, req.seed, adapter)
        except BaseException:
            live.calls.abort(plan)
            raise
        self._record(live, plan, sample, version, None, trained, {"call": asked})
        text = trim(sample.text, req.stop)
        lps = (
            completion_logprobs(sample.token_ids, sample.logprobs, self.chat.tokenizer, 0)
            if req.logprobs is not None
            else None
        )
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": req.model,
            "system_fingerprint": f"practicum-v{version}",
            "choices": [
                {"index": 0, "text": text, "finish_reason": sample.finish_reason, "logprobs": lps}
            ],
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": len(sample.token_ids),
                "total_tokens": len(ids) + len(sample.token_ids),
            },
        }


def _digest(key: str) -> bytes:
    """Keys are looked up by hash: the table holds no secret, and lookup time says nothing."""
    return hashlib.sha256(key.encode()).digest()
