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
by the run's max_seq_len, by `serve --max-tokens` and by the context left after the prompt.
With an API key, /v1 answers only requests that carry it as `Authorization: Bearer <key>`
(as vLLM's `--api-key`).

Log-probs are the engine's behaviour log-probs: log-softmax at the sampling temperature (0 for
greedy). Tool calls follow `practicum.serve.tools`; a forced `tool_choice` starts the reply with
the call for the model and fills the arguments field by field when the model's own JSON does
not fit the function's schema.

Each resource has its route module (`practicum.serve.routes`); what they share, the engine and
the key, is one `ServeState` on `app.state.serve`.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from practicum.engine.continuous import ServerStopped
from practicum.serve.loading import Served
from practicum.serve.protocol import APIError
from practicum.serve.routes import chat, completions, health, models
from practicum.serve.state import ServeState, authorized


def build_app(served: Served, api_key: str | None = None) -> FastAPI:
    """The API over `served` (module doc); with `api_key`, /v1 needs it as a Bearer token."""
    app = FastAPI(
        title="practicum serve",
        version="1",
        exception_handlers={
            APIError: _api_error,
            ServerStopped: _stopped,
            RequestValidationError: _invalid,
        },
    )
    app.state.serve = ServeState(served, api_key)
    app.include_router(health.router)
    for routes in (models, chat, completions):
        app.include_router(routes.router, prefix="/v1", dependencies=[Depends(authorized)])
    return app


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error body."""
    return JSONResponse(
        status_code=status,
        content={"error": {"message": message, "type": kind, "param": param, "code": None}},
    )


async def _api_error(_req: Request, e: APIError) -> JSONResponse:
    return _error(e.status, e.message, e.kind, e.param)


async def _stopped(_req: Request, e: ServerStopped) -> JSONResponse:
    return _error(503, str(e), "server_error")


async def _invalid(_req: Request, e: RequestValidationError) -> JSONResponse:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"] if x != "body")
    return _error(400, f"{where}: {err['msg']}", "invalid_request_error", where)
