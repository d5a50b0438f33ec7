"""Which frozen model inserts the milestone prints: `instrumenter` option -> LLMInstrumenter.

Specs (env option `instrumenter`):
    "policy_base"            the policy's base weights, never trained (default)
    "local:<model>"          another local model (HF folder or built-in name, see engine.models)
    "openai:<base_url>|<model>"  an OpenAI-compatible server (vLLM, llama.cpp, ...)
    "rules"                  no model: the rule-based AST inserter only

Every LLM path falls back to the rules whenever the rewrite is unusable (see `instrument`).

How "policy_base" stays frozen and thread-safe. Environments step in actor threads while the
learner trains, and `Policy` serves one caller at a time. Two ways:
- bound (`FrozenModel.from_policy(policy, lock)`): `with lock: with policy.frozen_base():
  policy.generate(...)`. The lock must be the one every other user of the policy takes: in the
  sync runtime, env steps never overlap generation or training (the main thread waits for them),
  so a lock private to the environments suffices; the async runtime samples from its generation
  server thread while envs step, and disabling the adapter there would corrupt its samples
  (it would have to take the weights gate exclusively and stall every actor for each rewrite).
  The sync runtime binds (`runtime.sync.share_policy_with_envs`); async does not.
- unbound (what `mle_suite` builds, and what async runs use): a separate, frozen copy of the
  same base weights (`cfg.model.model`), loaded on first use, shared by all environments of the
  process and serialised by its own lock. Nothing is shared with the trainer, so no lock with it is needed;
  the cost is one more copy of the base weights (~270 MB for SmolLM2-135M in bf16).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from practicum.envs.mle.instrument import LLMInstrumenter, openai_complete

_SYSTEM = "You are a careful programmer. You follow instructions exactly."


class FrozenModel:
    """A `complete(prompt) -> str` callable over a local causal LM, greedy, one call at a time."""

    def __init__(self, model: str | None = None, policy: Any = None,
                 lock: AbstractContextManager | None = None, max_new_tokens: int = 2048,
                 dtype: str = "auto"):
        if (model is None) == (policy is None):
            raise ValueError("FrozenModel needs exactly one of `model` (a spec) or `policy`")
        self.model_spec, self.dtype = model, dtype
        self.max_new_tokens = max_new_tokens
        self._policy = policy
        self._shared = policy is not None
        self._lock = lock if lock is not None else threading.Lock()
        self._load_lock = threading.Lock()
        self._chat = None

    @classmethod
    def from_policy(cls, policy: Any, lock: AbstractContextManager | None = None,
                    max_new_tokens: int = 2048) -> "FrozenModel":
        """The live policy with its adapter disabled (see the module docstring for `lock`)."""
        return cls(policy=policy, lock=lock, max_new_tokens=max_new_tokens)

    def _ensure_loaded(self) -> None:
        with self._load_lock:
            if self._policy is None:
                from practicum.engine.hf import Policy, PolicyConfig

                # lora=True + frozen_base() keeps bf16 weights where the CPU supports them
                # (lora=False would load fp32 for training); the adapter is never used.
                self._policy = Policy(PolicyConfig(model=self.model_spec, dtype=self.dtype,
                                                   lora=True, lora_r=1, merged_sampling=False))
            if self._chat is None:
                from practicum.engine.chat import ChatFormat

                self._chat = ChatFormat(self._policy.tokenizer)

    def __call__(self, prompt: str) -> str:
        from practicum.engine.base import SamplingParams

        self._ensure_loaded()
        policy, chat = self._policy, self._chat
        ids = chat.prompt_ids(prompt, _SYSTEM)
        limit = getattr(policy._lm.config, "max_position_embeddings", None) or 8192
        # The rewrite is the script plus seven short prints: never longer than the prompt,
        # which holds the script plus the instructions and the seven print lines.
        budget = min(self.max_new_tokens, len(ids), limit - len(ids))
        if budget <= 0:
            raise ValueError(f"instrumenter prompt of {len(ids)} tokens leaves no room to reply")
        params = SamplingParams(temperature=0.0, max_new_tokens=budget,
                                stop_token_ids=chat.stop_ids())
        base = policy.frozen_base() if policy.cfg.lora else nullcontext(policy)
        with self._lock, base:
            return policy.generate([ids], params)[0].text


_MODELS: dict[tuple[str, str], FrozenModel] = {}
_MODELS_LOCK = threading.Lock()


def shared_frozen_model(model: str, dtype: str = "auto") -> FrozenModel:
    """One `FrozenModel` per (model, dtype) per process, so environments share its weights."""
    with _MODELS_LOCK:
        key = (model, dtype)
        if key not in _MODELS:
            _MODELS[key] = FrozenModel(model=model, dtype=dtype)
        return _MODELS[key]


def make_complete(spec: str, base_model: str, dtype: str = "auto"
                  ) -> Callable[[str], str] | None:
    """The `complete` callable for an instrumenter spec (module docstring); None for "rules"."""
    spec = spec.strip()
    if spec == "rules":
        return None
    if spec == "policy_base":
        return shared_frozen_model(base_model, dtype)
    if spec.startswith("local:") and spec[len("local:"):].strip():
        return shared_frozen_model(spec[len("local:"):].strip(), dtype)
    if spec.startswith("openai:"):
        url, sep, model = spec[len("openai:"):].partition("|")
        if sep and url.strip() and model.strip():
            return openai_complete(url.strip(), model.strip())
    raise ValueError(
        f"config error at task.options.instrumenter: expected policy_base, rules, "
        f"local:<model> or openai:<base_url>|<model>, got {spec!r}"
    )


def make_instrumenter(spec: str, base_model: str, dtype: str = "auto") -> LLMInstrumenter | None:
    """An LLMInstrumenter for the spec, or None (rules only)."""
    complete = make_complete(spec, base_model, dtype)
    return None if complete is None else LLMInstrumenter(complete)
