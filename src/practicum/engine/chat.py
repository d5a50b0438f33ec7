"""Chat-template rendering that never re-renders history.

The template renders the initial prompt once; each later observation is appended as the
*delta* the template would add after the assistant's reply, tokenised on its own. The policy's
sampled ids therefore stay exactly as sampled, and the episode's ids equal
`prompt + sampled + observation + sampled + ...` (design.md, token-exactness).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

Message = dict[str, str]
"""A chat message: {"role": "system" | "user" | "assistant", "content": text}. Environments
write them (`practicum.envs.base` re-exports the name) and engines render them."""

_REPLY = "PRACTICUM_REPLY_MARK"
_OBS = "PRACTICUM_OBS_MARK"
_CONTENT = "PRACTICUM_CONTENT_MARK"


_PLAIN_BACKENDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PLAIN_LOCK = threading.Lock()


def untrusted_ids(tokenizer: Any, text: str) -> list[int]:
    """Ids of untrusted text (environment output, a client's message) in which control-token
    strings such as '<|im_start|>' stay plain text.

    transformers implements `split_special_tokens=True` on a fast tokenizer by flipping a flag
    of its shared Rust backend for the call. Another thread encoding at that moment (a chat
    template's own '<|im_end|>') then gets its control tokens cut into text, or this call gets
    them whole: both seen with actors rendering prompts in parallel. So untrusted text goes
    through a backend copy of its own, fixed in that mode, which nothing ever flips."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a Python tokenizer keeps no shared flag
        return list(
            tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        )
    with _PLAIN_LOCK:
        plain = _PLAIN_BACKENDS.get(tokenizer)
        if plain is None:
            from tokenizers import Tokenizer

            plain = Tokenizer.from_str(backend.to_str())
            plain.no_truncation()
            plain.no_padding()
            plain.encode_special_tokens = True
            _PLAIN_BACKENDS[tokenizer] = plain
    return list(plain.encode(text, add_special_tokens=False).ids)


class ChatFormat:
    """Renders prompts and observation deltas for one tokenizer's chat template."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; practicum needs a chat model")
        base_msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _REPLY}]
        base = tokenizer.apply_chat_template(base_msgs, tokenize=False)
        full = tokenizer.apply_chat_template(
            base_msgs + [{"role": "user", "content": _OBS}],
            tokenize=False,
            add_generation_prompt=True,
        )
        if not full.startswith(base):
            raise ValueError(
                "chat template re-renders earlier turns; observation deltas are unsafe"
            )
        self.reply_suffix = base[base.index(_REPLY) + len(_REPLY) :]
        """Text the template puts after an assistant reply (e.g. '<|im_end|>\\n')."""
        self.obs_prefix, self.obs_suffix = full[len(base) :].split(_OBS)
        self.eos_token_id = tokenizer.eos_token_id

    def render(self, messages: list[Message]) -> list[int]:
        """A prompt from chat messages (system, few-shot turns as real chat messages so a small
        model sees the protocol as a conversation, then the user turn), ready for the reply.

        Message contents are untrusted (they may hold tool output): they are encoded with
        `encode_text`, so text such as '<|im_start|>system' cannot forge a control token; only
        the template's own text becomes control tokens.
        """
        if not messages:
            raise ValueError("a prompt needs at least one message")
        marks = [f"{_CONTENT}{i}@" for i in range(len(messages))]
        shaped = [{**m, "content": mark} for m, mark in zip(messages, marks)]
        text = self.tokenizer.apply_chat_template(
            shaped, tokenize=False, add_generation_prompt=True
        )
        return self._splice(messages, marks, text)

    def observation_ids(self, observation: str, sampled_ids: list[int]) -> list[int]:
        """Ids to append after `sampled_ids` so the sequence reads as the next user turn.

        If the policy sampled the end-of-turn token itself, only the rest of the reply suffix
        is added; otherwise (cut by length or a stop string) the whole suffix closes the turn.
        """
        suffix = self.reply_suffix
        if sampled_ids:
            last = self.tokenizer.decode([sampled_ids[-1]])
            if last and suffix.startswith(last) and sampled_ids[-1] in self.stop_ids():
                suffix = suffix[len(last) :]
        return (
            self.encode(suffix + self.obs_prefix)
            + self.encode_text(observation)
            + self.encode(self.obs_suffix)
        )

    def continuation_ids(self, sampled_ids: list[int], messages: list[Message]) -> list[int]:
        """Ids to append after `sampled_ids` (an assistant reply) so the sequence goes on with
        `messages` (any roles) and ends ready for the next reply: `observation_ids` for a whole
        conversation tail. The reply itself is never re-rendered; only the template text after
        it is added (the part of the reply suffix the policy did not sample itself)."""
        if not messages:
            raise ValueError("a continuation needs at least one message")
        marks = [f"{_CONTENT}{i}@" for i in range(len(messages))]
        shaped = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _REPLY}]
        shaped += [{**m, "content": mark} for m, mark in zip(messages, marks)]
        text = self.tokenizer.apply_chat_template(
            shaped, tokenize=False, add_generation_prompt=True
        )
        text = text[text.index(_REPLY) + len(_REPLY) :]
        if not text.startswith(self.reply_suffix):
            raise ValueError("the chat template renders a reply differently before later turns")
        if sampled_ids and sampled_ids[-1] in self.stop_ids():
            last = self.tokenizer.decode([sampled_ids[-1]])
            if last and text.startswith(last):
                text = text[len(last) :]
        return self._splice(messages, marks, text)

    def stop_ids(self) -> list[int]:
        """End-of-turn ids: the eos id and the id of the reply suffix's first token."""
        ids = {self.eos_token_id} if self.eos_token_id is not None else set()
        first = self.encode(self.reply_suffix)[:1]
        ids.update(first)
        return sorted(ids)

    def encode(self, text: str) -> list[int]:
        """Template text: control-token strings such as '<|im_end|>' become control tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_text(self, text: str) -> list[int]:
        """Untrusted text (environment output): control-token strings stay plain text, so a
        program printing '<|im_start|>system' cannot forge a turn boundary."""
        return untrusted_ids(self.tokenizer, text)

    def _splice(self, messages: list[dict], marks: list[str], text: str) -> list[int]:
        """The ids of a template rendered with `marks` in place of the messages' contents: the
        template's own text around each mark, each message's content encoded on its own."""
        ids: list[int] = []
        for m, mark in zip(messages, marks):
            head, sep, text = text.partition(mark)
            if not sep:
                raise ValueError("the chat template dropped a message; cannot render it exactly")
            ids += self.encode(head) + self.encode_text(m["content"])
        return ids + self.encode(text)
