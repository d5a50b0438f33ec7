"""One live episode of the endpoint (`practicum.agent.endpoint`): its key, its recorded calls,
the limits its agent's calls are admitted under, and how it stands (a refusal fails it)."""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field

from practicum.agent.calls import EpisodeCalls
from practicum.serve.protocol import APIError


@dataclass(frozen=True)
class CallLimits:
    """What one episode's agent may ask of the endpoint."""

    max_calls: int = 200
    max_parallel: int = 4
    max_episode_tokens: int = 100_000
    """Sampled tokens over the whole episode."""
    max_call_tokens: int = 1024
    """Reply budget of one call (the agent may ask for less)."""
    min_reply_tokens: int = 32
    """Room a prompt must leave in the row (`practicum.agent.calls`, the cut rule)."""


@dataclass
class LiveEpisode:
    """One episode's key, its recorded calls and how it stands."""

    key: str
    calls: EpisodeCalls
    limits: CallLimits
    seed: int
    temperature: float | None
    """The run's temperature replacing the agent's; None: the agent's is honoured."""
    episode_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    submit_pattern: re.Pattern | None = None
    """A reply matching it ends the episode (`ended`), graded as it stands."""
    failure: str | None = None
    """The first refusal's reason."""
    ended: threading.Event = field(default_factory=threading.Event)
    """Set on a refusal or once a reply matched `submit_pattern`: the agent may be stopped."""
    submitted: bool = False
    last_reply: str | None = None
    """Text of the last policy reply (a grader may read the final answer from it)."""
    in_flight: int = 0
    admitted: int = 0
    refused: int = 0
    late: int = 0
    """Calls that finished after the episode closed (not recorded)."""
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def refuse(self, reason: str) -> None:
        self.refused += 1
        if self.failure is None:
            self.failure = f"refused call: {reason}"
        self.ended.set()

    def admit(self) -> None:
        """Count a call in, or raise the APIError that refuses it (the caller records it)."""
        lim = self.limits
        with self._lock:
            if self.failure is not None:
                raise APIError(409, f"this episode has already failed ({self.failure})")
            if self.admitted >= lim.max_calls:
                raise APIError(
                    429, f"more than {lim.max_calls} calls in one episode", kind="rate_limit_error"
                )
            if self.in_flight >= lim.max_parallel:
                raise APIError(
                    429, f"more than {lim.max_parallel} calls at once", kind="rate_limit_error"
                )
            if self.calls.sampled_tokens >= lim.max_episode_tokens:
                raise APIError(
                    429,
                    f"the episode's budget of {lim.max_episode_tokens} sampled tokens is spent",
                    kind="rate_limit_error",
                )
            self.admitted += 1
            self.in_flight += 1

    def release(self) -> None:
        """A call admitted earlier has ended."""
        with self._lock:
            self.in_flight -= 1
