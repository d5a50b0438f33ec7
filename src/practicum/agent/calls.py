"""One outside agent's episode, recorded call by call as the tokens practicum rendered and
sampled (no re-tokenisation anywhere).

    calls = EpisodeCalls(chat, max_seq_len=2048, min_reply_tokens=32)
    plan = calls.plan(messages, tools, adapter=True, prefix_ids=[])   # the ids to sample from
    sample, version = <the engine on plan.prompt_ids>
    calls.record(plan, sample, version, reply, trained=True)          # reply: as returned
    episode = calls.episode(task_id, group_id)

Continuation is decided at message level: a call continues a thread (one open training row)
when its messages start with that thread's messages plus the reply exactly as it was returned
(content, and tool calls with their arguments JSON-parsed; call ids ignored), and it adds at
least one message. Then the prompt is spliced: the thread's ids (what was rendered and
sampled so far) plus the template text of the new messages (`ChatFormat.continuation_ids`),
never the reply rendered again. Otherwise (the agent edited, truncated or summarised its
history; changed its tools; called the other model) the call starts a new thread, its
messages rendered afresh: a new segment of the episode. When several threads match, the
longest wins; a thread with a call in flight is not continued (the second call opens its own).

Cut rule (histories longer than a row): a call whose prompt would leave fewer than
`min_reply_tokens` of room under `max_seq_len` starts a new thread whose messages are
rendered afresh after dropping whole messages, oldest first, from those after the leading
system messages and the first user message, until it fits; the number dropped is kept in
the turn's info. If even the leading messages and the last one do not fit, the call is
refused (`ContextExceeded`). The thread keeps the agent's full messages, so its next call
continues the cut row.

Tokens the server put before the reply that the model did not sample (the template text of
new messages, a forced tool call's opening) are context: a turn's observation ids or a new
segment's context ids, never trained on.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from practicum.engine.base import Sample
from practicum.engine.chat import ChatFormat
from practicum.episode import Episode, Turn
from practicum.serve.tools import content_text, tool_messages

Key = tuple
"""A message reduced to what continuation compares: (role, text, ((name, args json), ...))."""


class ContextExceeded(ValueError):
    """Even the leading messages and the last one leave no room for a reply."""


def message_key(m: dict[str, Any]) -> Key:
    """What of a chat message decides continuation: role (developer = system), content text,
    and tool calls as (name, arguments) with the arguments JSON-parsed; ids are ignored."""
    role = "system" if m.get("role") == "developer" else m.get("role")
    calls = []
    for c in m.get("tool_calls") or []:
        f = c.get("function") or {}
        args = f.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        calls.append((f.get("name"), json.dumps(args, sort_keys=True)))
    return (role, content_text(m.get("content")), tuple(calls))


def reply_key(content: str | None, calls: list[dict[str, Any]]) -> Key:
    """The key of a reply as returned: its content and its parsed tool calls."""
    return (
        "assistant",
        content or "",
        tuple((c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in calls),
    )


@dataclass
class _Thread:
    """One open training row: its messages (the last one the reply), ids and turns."""

    messages: list[Key]
    tools: str | None
    adapter: bool
    ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    busy: bool = False


@dataclass
class CallPlan:
    """What one call samples from, and how its turn joins the episode."""

    prompt_ids: list[int]
    """The ids the engine samples after (what the request log records)."""
    keys: list[Key]
    tools: str | None
    """The call's tools as JSON ("" none); None: a completions call (no messages)."""
    adapter: bool
    thread: _Thread | None
    """The thread it continues; None: a new one."""
    inserted: list[int]
    """Continuing: the ids between the thread's last reply and this one (not sampled)."""
    dropped: int = 0
    """Messages left out by the cut rule."""


class EpisodeCalls:
    """The calls of one episode (module doc); thread-safe."""

    def __init__(self, chat: ChatFormat, max_seq_len: int, min_reply_tokens: int = 32):
        self.chat, self.max_seq_len, self.min_reply = chat, max_seq_len, min_reply_tokens
        self._threads: list[_Thread] = []
        self._lock = threading.Lock()
        self.calls = 0
        """Calls recorded."""
        self.continued = 0
        """Of them, calls that continued a thread."""
        self.cut = 0
        """Of them, calls whose history the cut rule shortened."""
        self.kept = 0
        """Calls whose messages hold an earlier reply as it was returned (the agent kept its
        history): those continuation should catch."""
        self._replies: set[Key] = set()

    # -- before sampling ------------------------------------------------------------------------
    def plan(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        adapter: bool,
        prefix_ids: list[int] = (),
    ) -> CallPlan:
        """The prompt of a call: its messages spliced onto the thread they continue, else
        rendered afresh (cut to fit); `prefix_ids` (a forced tool call's opening) follow."""
        keys = [message_key(m) for m in messages]
        tools_key = json.dumps(tools, sort_keys=True) if tools else ""
        prefix = list(prefix_ids)
        with self._lock:
            self.kept += any(k in self._replies for k in keys if k[0] == "assistant")
            best = None
            for th in self._threads:
                n = len(th.messages)
                if (
                    not th.busy
                    and th.adapter == adapter
                    and th.tools == tools_key
                    and len(keys) > n
                    and keys[:n] == th.messages
                    and (best is None or n > len(best.messages))
                ):
                    best = th
            if best is not None:
                tail = tool_messages(messages[len(best.messages) :], None)
                inserted = self.chat.continuation_ids(best.turns[-1].sampled_ids, tail) + prefix
                if len(best.ids) + len(inserted) + self.min_reply <= self.max_seq_len:
                    best.busy = True
                    return CallPlan(best.ids + inserted, keys, tools_key, adapter, best, inserted)
        ids, dropped = self._fresh(messages, tools, len(prefix))
        return CallPlan(ids + prefix, keys, tools_key, adapter, None, [], dropped)

    def plan_ids(self, ids: list[int], adapter: bool) -> CallPlan:
        """The prompt of a completions call: its ids as given; it continues the thread whose
        ids (prompt and sampled) it starts with, token for token."""
        with self._lock:
            best = None
            for th in self._threads:
                n = len(th.ids)
                if (
                    not th.busy
                    and th.tools is None
                    and th.adapter == adapter
                    and len(ids) > n
                    and ids[:n] == th.ids
                    and (best is None or n > len(best.ids))
                ):
                    best = th
            if best is not None:
                best.busy = True
                return CallPlan(list(ids), [], None, adapter, best, list(ids[len(best.ids) :]))
        if len(ids) + self.min_reply > self.max_seq_len:
            raise ContextExceeded(
                f"the prompt has {len(ids)} tokens; a row holds "
                f"{self.max_seq_len} (rollout.max_seq_len) with "
                f"{self.min_reply} left for the reply"
            )
        return CallPlan(list(ids), [], None, adapter, None, [])

    def _fresh(
        self, messages: list[dict], tools: list[dict] | None, extra: int
    ) -> tuple[list[int], int]:
        """(rendered ids, messages dropped) under the cut rule (module doc)."""
        head = 0
        while head < len(messages) and messages[head].get("role") in ("system", "developer"):
            head += 1
        if head < len(messages) and messages[head].get("role") == "user":
            head += 1
        kept, dropped = list(messages), 0
        while True:
            ids = self.chat.render(tool_messages(kept, tools))
            if len(ids) + extra + self.min_reply <= self.max_seq_len:
                return ids, dropped
            if len(kept) - head <= 1:
                raise ContextExceeded(
                    f"the call's messages need {len(ids)} tokens even cut to the leading "
                    f"messages and the last one; a row holds {self.max_seq_len} "
                    f"(rollout.max_seq_len) with {self.min_reply} left for the reply"
                )
            del kept[head]
            dropped += 1

    def abort(self, plan: CallPlan) -> None:
        """The call failed before it sampled anything: its thread is free again."""
        if plan.thread is not None:
            with self._lock:
                plan.thread.busy = False

    # -- after sampling ---------------------------------------------------------------------------
    def record(
        self,
        plan: CallPlan,
        sample: Sample,
        version: int,
        reply: Key | None,
        trained: bool = True,
        info: dict[str, Any] | None = None,
    ) -> Turn:
        """Add the call's turn: its sampled ids exactly, its thread's ids grow by them."""
        turn = Turn(
            sampled_ids=list(sample.token_ids),
            logprobs=list(sample.logprobs),
            policy_version=version,
            action_text=sample.text,
            finish_reason=sample.finish_reason,
            trained=trained,
            info={**(info or {}), "dropped_messages": plan.dropped}
            if plan.dropped
            else dict(info or {}),
        )
        with self._lock:
            th = plan.thread
            if th is None:
                turn.context_ids = list(plan.prompt_ids)
                th = _Thread(plan.keys, plan.tools, plan.adapter, [])
                self._threads.append(th)
            else:
                th.turns[-1].observation_ids = list(plan.inserted)
                self.continued += 1
            th.ids = plan.prompt_ids + turn.sampled_ids
            th.messages = plan.keys + [reply] if reply is not None else []
            if reply is not None:
                self._replies.add(reply)
            th.turns.append(turn)
            th.busy = False
            self.calls += 1
            self.cut += plan.dropped > 0
        return turn

    # -- the episode ------------------------------------------------------------------------------
    def episode(self, task_id: str, group_id: str, **fields: Any) -> Episode:
        """The recorded calls as one `Episode`: each thread a segment, in the order the threads
        began, its turns in call order (the first thread's prompt is the episode's)."""
        with self._lock:
            turns = [
                Turn(**{**t.__dict__, "info": dict(t.info)})
                for th in self._threads
                for t in th.turns
            ]
        prompt: list[int] = []
        if turns:
            prompt, turns[0].context_ids = turns[0].context_ids or [], None
        return Episode(task_id=task_id, group_id=group_id, prompt_ids=prompt, turns=turns, **fields)

    @property
    def threads(self) -> list[_Thread]:
        with self._lock:
            return list(self._threads)

    @property
    def segments(self) -> int:
        return len(self._threads)

    @property
    def sampled_tokens(self) -> int:
        with self._lock:
            return sum(len(t.sampled_ids) for th in self._threads for t in th.turns)
