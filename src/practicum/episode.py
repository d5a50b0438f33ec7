"""Token-exact episodes: what the engine sampled and what the environment returned, id for id.

An episode is made of segments; each segment becomes one training row:

    segment 0:  prompt_ids | sampled(turn 0) | observation(turn 0) | sampled(turn 1) | ...
    segment 1:  context_ids(turn k) | sampled(turn k) | observation(turn k) | ...

A turn continues the current segment unless it carries its own `context_ids` (a prompt
rendered afresh, as AgentFlow's planner rebuilds its prompt from memory every turn); then it
starts a new one. History is never re-rendered from text (retokenisation drift is the most
common multi-turn RL bug): the trainer's input is exactly `Segment.input_ids`, and the loss
mask is 1 exactly on the sampled ids.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class Turn:
    """One policy action and the environment's answer to it."""

    sampled_ids: list[int]
    """Token ids exactly as the engine sampled them (including a sampled stop/eos id)."""
    logprobs: list[float]
    """Behaviour log-probs of `sampled_ids` under the sampling distribution (same length)."""
    policy_version: int
    """Version of the weights that sampled this turn."""
    observation_ids: list[int] = field(default_factory=list)
    """Ids appended after the action in the same segment: the chat-template delta carrying the
    observation (empty on the last turn of a segment)."""
    context_ids: list[int] | None = None
    """When set, this turn starts a new segment whose prompt is these ids."""
    action_text: str = ""
    observation_text: str = ""
    finish_reason: str = ""
    """How generation ended: 'stop', 'length' (max_new_tokens) or 'budget' (cut by the
    remaining room of `rollout.max_seq_len`)."""
    malformed: bool = False
    """The environment could not parse or apply the action."""
    env_duration: float = 0.0
    """Wall-clock seconds the environment spent on this action (feeds duration-aware weights)."""
    reward: float = 0.0
    """Per-turn reward reported by the environment."""
    info: dict[str, Any] = field(default_factory=dict)
    grammar: str | None = None
    """The Lark grammar the turn was sampled under (its tokens drawn from the grammar-masked
    distribution, `practicum.engine.constraint`); None: free text."""
    trained: bool = True
    """False: the ids stay in the row as context but leave the loss (mask 0, turn index -1):
    a call an outside agent made to the frozen base, or at a temperature the learner does not
    score (`practicum.agent`)."""

    def __post_init__(self) -> None:
        if len(self.sampled_ids) != len(self.logprobs):
            raise ValueError(
                f"turn has {len(self.sampled_ids)} sampled ids but {len(self.logprobs)} log-probs"
            )

    @property
    def cut(self) -> bool:
        """Generation was stopped by a length limit, not by the policy."""
        return self.finish_reason in ("length", "budget")


@dataclass
class Segment:
    """One training row of an episode; lists are aligned per position."""

    input_ids: list[int]
    loss_mask: list[int]
    """1 exactly on sampled ids (of turns that are trained)."""
    behaviour_logprobs: list[float]
    """Behaviour log-prob per position; 0.0 where the mask is 0."""
    turn_index: list[int]
    """Per position: index (in `Episode.turns`) of the turn that sampled it, -1 elsewhere."""
    constrained: list[tuple[int, int, str]] = field(default_factory=list)
    """(start, end, grammar) of each turn sampled under a grammar: positions start..end-1 are
    its sampled ids, each drawn from the grammar's mask (the learner replays it)."""


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
    """Stopped by the turn budget (or the length budget) before the environment said done."""
    overlong: bool = False
    """Its outcome was decided by a length limit: the final turn was cut mid-generation, or the
    sequence budget left no room to go on (DAPO masks these out of the loss)."""
    failure: str | None = None
    """Why the episode ended abnormally (env crash, timeout, generation error), else None."""
    solved: bool | None = None
    """The environment's verdict on the task; None when it has no notion of solving."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The environment's numbers about the episode (from its last step)."""
    episode_id: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    # -- training rows ----------------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        """One row per segment (module doc); segments without sampled tokens are left out."""
        rows: list[Segment] = []
        cur = Segment(
            list(self.prompt_ids),
            [0] * len(self.prompt_ids),
            [0.0] * len(self.prompt_ids),
            [-1] * len(self.prompt_ids),
        )
        for k, t in enumerate(self.turns):
            if t.context_ids is not None:
                rows.append(cur)
                n = len(t.context_ids)
                cur = Segment(list(t.context_ids), [0] * n, [0.0] * n, [-1] * n)
            n, m = len(t.sampled_ids), len(t.observation_ids)
            if t.grammar is not None and n and t.trained:
                start = len(cur.input_ids)
                cur.constrained.append((start, start + n, t.grammar))
            cur.input_ids += t.sampled_ids + t.observation_ids
            if t.trained:
                cur.loss_mask += [1] * n + [0] * m
                cur.behaviour_logprobs += list(t.logprobs) + [0.0] * m
                cur.turn_index += [k] * n + [-1] * m
            else:
                cur.loss_mask += [0] * (n + m)
                cur.behaviour_logprobs += [0.0] * (n + m)
                cur.turn_index += [-1] * (n + m)
        rows.append(cur)
        return [r for r in rows if any(r.loss_mask)]

    @property
    def num_sampled(self) -> int:
        return sum(len(t.sampled_ids) for t in self.turns)

    @property
    def env_duration(self) -> float:
        return sum(t.env_duration for t in self.turns)

    # -- persistence ------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        """From `to_json`'s dict; files written before a field existed load with its default."""
        d = dict(d)
        turn_keys = {f.name for f in fields(Turn)}
        d["turns"] = [
            Turn(**{k: v for k, v in t.items() if k in turn_keys}) for t in d.get("turns", [])
        ]
        for t in d["turns"]:
            if not t.finish_reason:  # older files kept it in info
                t.finish_reason = t.info.get("finish_reason", "")
        keys = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in keys})

    @classmethod
    def from_json(cls, line: str) -> Episode:
        return cls.from_dict(json.loads(line))
