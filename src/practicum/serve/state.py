"""What every route of the API shares (`ServeState`, kept on `app.state.serve`): the engine, the
API key, and the checks a request passes on its way to the engine."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fastapi import Request

from practicum.engine.base import Sample, SamplingParams
from practicum.serve.loading import Served
from practicum.serve.protocol import APIError, BaseRequest


@dataclass
class ServeState:
    served: Served
    api_key: str | None = None
    """With a key, /v1 answers only requests that carry it as a Bearer token."""
    created: int = field(default_factory=lambda: int(time.time()))
    """When the app was built: the models' `created`."""

    @property
    def tok(self):
        return self.served.tokenizer

    def adapter_for(self, name: str) -> bool:
        """The adapter flag of model id `name` (404 for an unknown one)."""
        if name not in self.served.names:
            raise APIError(
                404,
                f"model {name!r} does not exist; this server has {', '.join(self.served.names)}",
                "model",
                "not_found_error",
            )
        return self.served.names[name]

    def model_card(self, name: str) -> dict:
        served = self.served
        return {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "practicum",
            "root": served.target.model,
            "parent": None if served.names[name] else served.target.name,
        }

    def params_for(
        self, req: BaseRequest, prompt_len: int, default_tokens: int, stop_ids: Sequence[int] = ()
    ) -> SamplingParams:
        """max_tokens (or the default) capped by the context left and `served.max_tokens`
        (the run's max_seq_len, `--max-tokens`)."""
        served = self.served
        room = (served.context - prompt_len) if served.context else None
        if room is not None and room <= 0:
            raise APIError(
                400,
                f"the prompt has {prompt_len} tokens; this model's context is {served.context}",
                "messages",
            )
        wanted = getattr(req, "max_completion_tokens", None) or req.max_tokens
        max_new = wanted if wanted is not None else default_tokens
        for cap in (room, served.max_tokens):
            if cap is not None:
                max_new = min(max_new, cap)
        temperature = 1.0 if req.temperature is None else req.temperature
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        return SamplingParams(
            temperature=temperature,
            top_p=(req.top_p or 1.0) if temperature > 0 else 1.0,
            max_new_tokens=max_new,
            stop_strings=tuple(s for s in stops if s),
            stop_token_ids=tuple(stop_ids),
        )

    async def generate(
        self, ids: list[int], params: SamplingParams, seed: int | None, adapter: bool
    ) -> Sample:
        try:
            return await self.served.generate(ids, params, seed, adapter)
        except ValueError as e:  # the engine's checks (e.g. prompt plus tokens too long)
            raise APIError(400, str(e)) from None


def state_of(request: Request) -> ServeState:
    return request.app.state.serve


async def authorized(request: Request) -> None:
    """The /v1 dependency: the request carries the API key, when there is one."""
    api_key = state_of(request).api_key
    if api_key is None:
        return
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(
        key.strip().encode(), api_key.encode()
    ):
        raise APIError(
            401,
            "invalid or missing API key (send Authorization: Bearer <key>)",
            None,
            "authentication_error",
        )


def seed_of(req: BaseRequest, i: int) -> int | None:
    """The seed of a request's i-th choice (None: unseeded)."""
    return None if req.seed is None else req.seed + i
