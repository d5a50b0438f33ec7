"""Incremental streaming: tokens leave the engine as they are sampled and reach the client as
text deltas in OpenAI chunks (chat and completions).

    async for index, token, logprob_or_sample in token_events(served, jobs, adapter): ...
    delta = TextDelta(tokenizer, stops); delta.push(token) -> newly final text

A delta holds back text that may still change: a partial UTF-8 character until its last byte,
and the last len(longest stop string) - 1 characters until no stop string can begin in them
(the OpenAI API leaves stop strings out of the reply).
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from practicum.engine.base import Sample, SamplingParams


async def token_events(
    served, jobs: list[tuple[list[int], SamplingParams, int | None]], adapter: bool
) -> AsyncIterator[tuple[int, int | None, float | Sample]]:
    """(job index, token id, log-prob) per sampled token of the concurrent `jobs`, then
    (job index, None, sample) when a job ends; the engine's error for a job it refused. Closing
    the iterator (e.g. the client went away) drops the unfinished rows at the next step."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    put = lambda item: loop.call_soon_threadsafe(events.put_nowait, item)  # noqa: E731
    futures = []
    for i, (ids, params, seed) in enumerate(jobs):
        f = served.server.submit(
            ids, params, seed, adapter, on_token=lambda t, lp, i=i: put((i, t, lp))
        )
        f.add_done_callback(lambda f, i=i: put((i, None, f)))
        futures.append(f)
    try:
        for _ in range(len(jobs)):
            while True:
                i, token, x = await events.get()
                if token is not None:
                    yield i, token, x
                    continue
                sample, _version = x.result()
                served.count(adapter, len(jobs[i][0]), len(sample.token_ids))
                yield i, None, sample
                break
    finally:
        for f in futures:
            f.cancel()


class TextDelta:
    """The reply's text released as it becomes final (module doc)."""

    def __init__(self, tokenizer, stops: tuple[str, ...] = ()):
        self.tokenizer, self.stops = tokenizer, tuple(s for s in stops if s)
        self.hold = max(map(len, self.stops), default=1) - 1
        self.ids: list[int] = []
        self.sent = ""

    def push(self, token: int) -> str:
        """Text that became final with `token` ("" if none yet)."""
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        cut = trim(text, self.stops)
        ready = cut if len(cut) < len(text) else text[: len(text) - self.hold]
        return self._release(ready)

    def finish(self, text: str) -> str:
        """The rest of the reply, whose whole text (stop string cut off) is `text`."""
        return self._release(text)

    def _release(self, ready: str) -> str:
        if len(ready) <= len(self.sent) or not ready.startswith(self.sent):
            return ""
        delta, self.sent = ready[len(self.sent) :], ready
        return delta


def trim(text: str, stops) -> str:
    """The text up to the first stop string (the engine keeps the token that completed it; the
    OpenAI API leaves the stop string out)."""
    stops = [stops] if isinstance(stops, str) else list(stops or [])
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


def chat_logprobs(pairs: list[tuple[int, float]], tok) -> list[dict]:
    """The chat API's log-probs of (token id, log-prob) pairs."""
    out = []
    for t, lp in pairs:
        piece = tok.decode([t])
        out.append(
            {"token": piece, "logprob": lp, "bytes": list(piece.encode()), "top_logprobs": []}
        )
    return out


def completion_logprobs(ids: list[int], logprobs: list[float], tok, start: int) -> dict:
    """The completions API's log-probs; offsets count from the start of the choice's text, where
    the first of these tokens starts at `start`."""
    pieces = [tok.decode([t]) for t in ids]
    offsets, at = [], start
    for p in pieces:
        offsets.append(at)
        at += len(p)
    return {
        "tokens": pieces,
        "token_logprobs": list(logprobs),
        "top_logprobs": None,
        "text_offset": offsets,
    }


class _Choices:
    """Per choice of a stream: its text delta and the tokens no chunk has carried yet."""

    def __init__(self, n: int, tok, stops: tuple[str, ...]):
        self.deltas = [TextDelta(tok, stops) for _ in range(n)]
        self.held: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.stops = stops

    def push(self, i: int, token: int, logprob: float) -> str:
        self.held[i].append((token, logprob))
        return self.deltas[i].push(token)

    def finish(self, i: int, sample: Sample) -> str:
        return self.deltas[i].finish(trim(sample.text, self.stops))

    def take(self, i: int) -> list[tuple[int, float]]:
        held, self.held[i] = self.held[i], []
        return held


async def chat_stream(
    served,
    head: dict,
    jobs,
    adapter: bool,
    stops: tuple[str, ...],
    logprobs: bool,
    include_usage: bool,
):
    """chat.completion.chunk dicts of `jobs` (one per choice) as their tokens are sampled; `head`
    holds the chunks' id, object, created and model."""
    tok = served.tokenizer
    state = _Choices(len(jobs), tok, stops)

    def chunk(i: int, delta: dict, finish: str | None = None) -> dict:
        lps = {"content": chat_logprobs(state.take(i), tok)} if logprobs else None
        return {
            **head,
            "choices": [{"index": i, "delta": delta, "finish_reason": finish, "logprobs": lps}],
        }

    for i in range(len(jobs)):
        yield chunk(i, {"role": "assistant", "content": ""})
    completion, last = 0, None
    async for i, token, x in token_events(served, jobs, adapter):
        text = state.push(i, token, x) if token is not None else state.finish(i, x)
        if text or (token is None and state.held[i] and logprobs):
            yield chunk(i, {"content": text})
        if token is None:
            completion += len(x.token_ids)
            if last is not None:
                yield last
            last = chunk(i, {}, x.finish_reason)
    for c in _closing(last, head, len(jobs[0][0]), completion, include_usage):
        yield c


async def completion_stream(
    served,
    head: dict,
    jobs,
    echoes: list[str],
    adapter: bool,
    stops: tuple[str, ...],
    logprobs: bool,
    include_usage: bool,
    prompt_tokens: int,
):
    """text_completion chunk dicts of `jobs` (one per choice, each after its echoed prompt) as
    their tokens are sampled."""
    tok = served.tokenizer
    state = _Choices(len(jobs), tok, stops)
    at = [0] * len(jobs)
    """Where each choice's next chunk starts in its text (the echoed prompt included)."""

    def chunk(i: int, text: str, finish: str | None = None) -> dict:
        lps = None
        if logprobs:
            held = state.take(i)
            lps = completion_logprobs([t for t, _ in held], [lp for _, lp in held], tok, at[i])
        at[i] += len(text)
        return {
            **head,
            "choices": [{"index": i, "text": text, "finish_reason": finish, "logprobs": lps}],
        }

    for i, echo in enumerate(echoes):
        if echo:
            yield chunk(i, echo)
    completion, last = 0, None
    async for i, token, x in token_events(served, jobs, adapter):
        text = state.push(i, token, x) if token is not None else state.finish(i, x)
        if text or (token is None and state.held[i] and logprobs):
            yield chunk(i, text)
        if token is None:
            completion += len(x.token_ids)
            if last is not None:
                yield last
            last = chunk(i, "", x.finish_reason)
    for c in _closing(last, head, prompt_tokens, completion, include_usage):
        yield c


def _closing(
    last: dict, head: dict, prompt_tokens: int, completion_tokens: int, include_usage: bool
) -> list[dict]:
    """The stream's last chunks, the usage in the last one: its own chunk with no choices under
    stream_options.include_usage (as the OpenAI API sends it), else on the final choice chunk."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if include_usage:
        return [last, {**head, "choices": [], "usage": usage}]
    return [{**last, "usage": usage}]
