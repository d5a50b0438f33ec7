"""Token-exact episodes: what the engine sampled and what the environment returned, id for id.

An episode is a flat token sequence built from segments:

    prompt_ids | sampled_ids(turn 0) | observation_ids(turn 0) | sampled_ids(turn 1) | ...

History is never re-rendered from text (retokenisation drift is the most common multi-turn RL
bug); the trainer's input is exactly `Episode.input_ids()`, and the loss mask is 1 exactly on
the sampled ids.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    """One policy action and the environment's answer to it."""

    sampled_ids: list[int]
    """Token ids exactly as the engine sampled them (including a sampled stop/eos id)."""
    logprobs: list[float]
    """Behaviour log-probs of `sampled_ids` under the sampling policy (same length)."""
    policy_version: int
    """Version of the weights that sampled this turn."""
    observation_ids: list[int] = field(default_factory=list)
    """Ids appended after the action: chat-template delta carrying the observation (may be empty
    on the last turn)."""
    action_text: str = ""
    observation_text: str = ""
    env_duration: float = 0.0
    """Wall-clock seconds the environment spent on this action (feeds duration-aware weights)."""
    reward: float = 0.0
    """Per-turn reward reported by the environment."""
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.sampled_ids) != len(self.logprobs):
            raise ValueError(
                f"turn has {len(self.sampled_ids)} sampled ids but {len(self.logprobs)} log-probs"
            )


@dataclass
class Episode:
    """A whole multi-turn rollout of one task."""

    task_id: str
    group_id: str
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    """Final (episode) reward used for advantages."""
    truncated: bool = False
    """Stopped by the turn or token budget before the environment said done."""
    overlong: bool = False
    """The sequence hit the maximum length mid-generation (DAPO masks these out)."""
    failure: str | None = None
    """Why the episode ended abnormally (env crash, timeout, unparsable action), else None."""
    episode_id: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    # -- token views --------------------------------------------------------------------------
    def input_ids(self) -> list[int]:
        ids = list(self.prompt_ids)
        for t in self.turns:
            ids += t.sampled_ids + t.observation_ids
        return ids

    def loss_mask(self) -> list[int]:
        """1 exactly on sampled ids, 0 on prompt and observation ids."""
        mask = [0] * len(self.prompt_ids)
        for t in self.turns:
            mask += [1] * len(t.sampled_ids) + [0] * len(t.observation_ids)
        return mask

    def behaviour_logprobs(self) -> list[float]:
        """Per position (aligned with input_ids); 0.0 where the mask is 0."""
        lp = [0.0] * len(self.prompt_ids)
        for t in self.turns:
            lp += list(t.logprobs) + [0.0] * len(t.observation_ids)
        return lp

    def turn_index(self) -> list[int]:
        """Per position: index of the turn that sampled it, -1 for prompt/observation ids."""
        idx = [-1] * len(self.prompt_ids)
        for k, t in enumerate(self.turns):
            idx += [k] * len(t.sampled_ids) + [-1] * len(t.observation_ids)
        return idx

    @property
    def num_sampled(self) -> int:
        return sum(len(t.sampled_ids) for t in self.turns)

    @property
    def env_duration(self) -> float:
        return sum(t.env_duration for t in self.turns)

    @property
    def min_policy_version(self) -> int:
        return min((t.policy_version for t in self.turns), default=0)

    # -- persistence --------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        d = dict(d)
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**d)

    @classmethod
    def from_json(cls, line: str) -> "Episode":
        return cls.from_dict(json.loads(line))
