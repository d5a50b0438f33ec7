"""What every engine provides: token ids in, sampled token ids and their log-probs out.

Engines never see text history: the actor keeps the exact ids (see `practicum.episode`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy. Log-probs are those of softmax(logits / T)."""
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop_strings: list[str] = field(default_factory=list)
    """Generation of a sequence stops once its decoded text contains one of these."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Extra stop ids besides the tokenizer's eos; the stop id itself is kept as sampled."""
    seed: int | None = None


@dataclass
class Sample:
    token_ids: list[int]
    """Exactly the sampled ids (stop id included when one was sampled; never padding)."""
    logprobs: list[float]
    """log pi(token | prefix) under the sampling weights at the sampling temperature."""
    text: str
    finish_reason: str
    """'stop' (eos/stop id/stop string) or 'length' (max_new_tokens reached)."""


class Engine(Protocol):
    version: int
    """Policy version of the current weights; bumped on every weight update."""

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        """Sample one continuation per prompt (prompts are token-id lists, no padding)."""
        ...
