"""One model service for every LLM call an environment makes (instrumenter, executor, verifier,
generator, judge, issue writer).

    service.complete(messages, params, adapter=False)   # the live policy; adapter off = frozen base
    client = service.client("base")                      # a role's backend, chosen by config:
        "policy"                  the live policy (adapter on), batched with the actors' turns
        "base"                    the live policy with its adapter off: the frozen base model,
                                  in its own sub-batch of the same generation server, no copy
        "local:<model>"           another local HF model (built-in name or folder), frozen
        "openai:<base_url>|<model>"  an OpenAI-compatible endpoint (vLLM, llama.cpp, ...)
        "rules"                   no model: `client` returns None and the caller uses its rules
    client.complete(messages, params) -> Completion

Environments get the service from their factory (`EnvFactory(service)`); one running in a child
process gets a proxy with the same interface whose calls the parent serves (`process_env`).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from practicum.engine.base import Sample, SamplingParams, derive_seed
from practicum.errors import ConfigError

if TYPE_CHECKING:
    from practicum.engine.chat import ChatFormat, Message
    from practicum.engine.server import GenerationServer

DEFAULT_PARAMS = SamplingParams(temperature=0.0, max_new_tokens=512)
"""Model-service calls are greedy unless the caller asks otherwise."""

SPECS = "policy, base, local:<model>, openai:<base_url>|<model> or rules"


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str


class ModelClient(Protocol):
    """One role's backend."""

    def complete(
        self, messages: list[Message], params: SamplingParams | None = None
    ) -> Completion: ...


class ModelService:
    """Routes environment LLM calls to the live policy or to other backends (module doc)."""

    def __init__(
        self,
        server: GenerationServer | None = None,
        chat: ChatFormat | None = None,
        dtype: str = "auto",
    ):
        self.server, self.chat, self.dtype = server, chat, dtype
        self._clients: dict[str, ModelClient | None] = {}
        self._lock = threading.Lock()

    def complete(
        self, messages: list[Message], params: SamplingParams | None = None, adapter: bool = True
    ) -> Completion:
        """Call the live policy (adapter=False: its frozen base)."""
        if self.server is None or self.chat is None:
            raise RuntimeError("this model service has no live policy (built without a server)")
        params = params or DEFAULT_PARAMS
        ids = self.chat.render(messages)
        params = replace(
            params, stop_token_ids=tuple(sorted({*params.stop_token_ids, *self.chat.stop_ids()}))
        )
        seed = None if params.temperature == 0 else derive_seed(*ids)
        sample, _version = self.server.generate(ids, params, seed=seed, adapter=adapter)
        return Completion(sample.text, sample.token_ids, sample.finish_reason)

    def client(self, spec: str) -> ModelClient | None:
        """The backend a role's config names (module doc); None for "rules"."""
        spec = spec.strip()
        with self._lock:
            if spec not in self._clients:
                self._clients[spec] = self._build(spec)
            return self._clients[spec]

    def _build(self, spec: str) -> ModelClient | None:
        check_spec(spec)
        if spec == "rules":
            return None
        if spec in ("policy", "base"):
            return PolicyClient(self, adapter=spec == "policy")
        if spec.startswith("local:"):
            return local_client(spec[len("local:") :].strip(), self.dtype)
        url, _, model = spec[len("openai:") :].partition("|")
        return OpenAIClient(url.strip(), model.strip())


def check_spec(spec: str, key: str = "model", resolve_local: bool = False) -> None:
    """Raise ConfigError (naming `key`) unless `spec` is a valid backend spec. With
    `resolve_local` (config validation), a local:<model> must also resolve offline now, not at
    the first episode that calls it (a built-in name counts: it is converted on first use)."""
    spec = spec.strip()
    if spec in ("policy", "base", "rules"):
        return
    if spec.startswith("local:") and spec[len("local:") :].strip():
        if resolve_local:
            _check_local_model(spec[len("local:") :].strip(), key)
        return
    if spec.startswith("openai:"):
        url, sep, model = spec[len("openai:") :].partition("|")
        if sep and url.strip() and model.strip():
            return
    raise ConfigError(f"config error at {key}: expected {SPECS}, got {spec!r}")


def _check_local_model(model: str, key: str) -> None:
    from practicum.engine.models import BUILTIN_MODELS, ModelNotFoundError, resolve_model

    if model.lower() in BUILTIN_MODELS:
        return
    try:
        resolve_model(model)
    except ModelNotFoundError as e:
        raise ConfigError(f"config error at {key}: {e}") from None


@dataclass
class PolicyClient:
    """The live policy through the run's generation server, adapter on or off."""

    service: ModelService
    adapter: bool

    def complete(self, messages: list[Message], params: SamplingParams | None = None) -> Completion:
        return self.service.complete(messages, params, adapter=self.adapter)


class LocalClient:
    """A frozen local model in this process (loaded on first use, one caller at a time)."""

    def __init__(self, model: str, dtype: str = "auto"):
        self.model, self.dtype = model, dtype
        self._lock = threading.Lock()
        self._sampler = None
        self._chat = None

    def complete(self, messages: list[Message], params: SamplingParams | None = None) -> Completion:
        from practicum.engine.chat import ChatFormat
        from practicum.engine.hf import load_frozen_sampler

        with self._lock:
            if self._sampler is None:
                self._sampler = load_frozen_sampler(self.model, self.dtype)
                self._chat = ChatFormat(self._sampler.tokenizer)
            params = params or DEFAULT_PARAMS
            ids = self._chat.render(messages)
            params = replace(
                params,
                stop_token_ids=tuple(sorted({*params.stop_token_ids, *self._chat.stop_ids()})),
            )
            seed = None if params.temperature == 0 else derive_seed(*ids)
            sample: Sample = self._sampler.generate(
                [ids], params, seeds=[seed] if seed else None, adapter=False
            )[0]
        return Completion(sample.text, sample.token_ids, sample.finish_reason)


_LOCAL: dict[tuple[str, str], LocalClient] = {}
_LOCAL_LOCK = threading.Lock()


def local_client(model: str, dtype: str = "auto") -> LocalClient:
    """One LocalClient per (model, dtype) per process, so every role shares its weights."""
    with _LOCAL_LOCK:
        return _LOCAL.setdefault((model, dtype), LocalClient(model, dtype))


class OpenAIClient:
    """An OpenAI-compatible chat-completions endpoint (standard library HTTP, no extra deps)."""

    def __init__(
        self, base_url: str, model: str, api_key: str | None = None, timeout: float = 300.0
    ):
        url = base_url.rstrip("/")
        self.url = (url if url.endswith("/v1") else url + "/v1") + "/chat/completions"
        self.model, self.api_key, self.timeout = model, api_key, timeout

    def complete(self, messages: list[Message], params: SamplingParams | None = None) -> Completion:
        params = params or DEFAULT_PARAMS
        if params.grammar is not None:  # no standard field for it: refuse rather than drop it
            raise ValueError(
                "an OpenAI-compatible endpoint takes no grammar "
                "(SamplingParams.grammar); use the policy or a local model"
            )
        body = {
            "model": self.model,
            "messages": list(messages),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.stop_strings:
            body["stop"] = list(params.stop_strings)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, json.dumps(body).encode(), headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            choice = json.loads(response.read())["choices"][0]
        return Completion(
            choice["message"].get("content") or "", [], choice.get("finish_reason") or "stop"
        )
