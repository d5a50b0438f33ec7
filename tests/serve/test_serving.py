"""A server that serves everyone, through the official openai client: a short request finishes
while a long one runs (and samples what it samples alone), a client that goes away frees its row,
replies are capped by the context, the run's max_seq_len and `--max-tokens`, streams carry tokens as
they are sampled with the usage last, an API key guards /v1, and bad ids or roles get a 400
without a traceback."""

import logging
import threading
import time
import urllib.request

import openai
import pytest

from practicum.serve.app import build_app
from practicum.serve.http import ServerThread

HI = [{"role": "user", "content": "Hi there"}]
LONG = 200
"""Tokens of the long request: many more decode steps than a short request needs."""


def wait_until(check, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def long_stream(client, started: threading.Event, tokens: list, **kw):
    """A long greedy completion, streamed; its chunk texts collect in `tokens`."""
    for chunk in client.completions.create(
        model="calc", prompt="Once upon a time", max_tokens=LONG, temperature=0, stream=True, **kw
    ):
        if chunk.choices and chunk.choices[0].text:
            tokens.append(chunk.choices[0].text)
            started.set()


def test_a_short_request_finishes_while_a_long_one_runs_and_samples_as_alone(api):
    served, client = api
    alone = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=4, temperature=0.8, seed=5, logprobs=True
    )
    started, long_tokens = threading.Event(), []
    runner = threading.Thread(target=long_stream, args=(client, started, long_tokens))
    runner.start()
    try:
        assert started.wait(60)
        beside = client.chat.completions.create(
            model="calc", messages=HI, max_tokens=4, temperature=0.8, seed=5, logprobs=True
        )
        assert runner.is_alive() and served.server.running == 1  # the long one goes on
    finally:
        runner.join()
    assert beside.choices[0].message.content == alone.choices[0].message.content
    assert [t.logprob for t in beside.choices[0].logprobs.content] == pytest.approx(
        [t.logprob for t in alone.choices[0].logprobs.content], abs=1e-4
    )
    assert len("".join(long_tokens)) > 0


def test_a_client_that_goes_away_frees_its_row(api):
    """A client that gives up mid-reply frees its row. It gives up at a quarter of the time the
    whole reply takes on this machine (measured first), not after a fixed second: a fast
    machine finished the reply within a second."""
    served, client = api
    start = time.perf_counter()
    probe = client.completions.create(
        model="calc", prompt="Once upon a time", max_tokens=64, temperature=0
    )
    per_token = (time.perf_counter() - start) / probe.usage.completion_tokens
    impatient = client.with_options(timeout=max(0.2, per_token * served.context / 4))
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(
            model="calc", prompt="Once upon a time", max_tokens=100_000, temperature=0
        )
    wait_until(lambda: served.server.running == 0, 10)
    stream = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=LONG, temperature=0, stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    steps = served.server.steps
    stream.close()
    wait_until(lambda: served.server.running == 0, 10)
    assert served.server.steps - steps < LONG // 2


def test_max_tokens_is_capped_by_the_context_and_the_server_flag(api):
    served, client = api
    context, cap = served.context, served.max_tokens
    try:
        served.context = 40
        r = client.completions.create(
            model="calc", prompt="Once upon a time", max_tokens=10**9, temperature=0
        )
        assert r.usage.total_tokens == 40 and r.choices[0].finish_reason == "length"
        served.max_tokens = 7
        r = client.chat.completions.create(
            model="calc", messages=HI, max_tokens=10**9, temperature=0
        )
        assert r.usage.completion_tokens == 7
    finally:
        served.context, served.max_tokens = context, cap


def test_a_run_folders_max_seq_len_caps_its_replies(tiny_run, tmp_path):
    import shutil

    from practicum.serve.loading import load_served, resolve_target

    run = shutil.copytree(tiny_run, tmp_path / "calc")
    assert resolve_target(run).max_seq_len is None
    (run / "config.yaml").write_text("rollout:\n  max_seq_len: 300\n")
    assert resolve_target(run).max_seq_len == 300
    assert resolve_target(run / "checkpoints" / "step_000003").max_seq_len == 300
    for flag, cap in ((None, 300), (500, 300), (20, 20)):
        served = load_served(run, dtype="float32", max_tokens=flag)
        served.close()
        assert served.max_tokens == cap


def test_streams_send_tokens_as_they_are_sampled_and_usage_last(api):
    served, client = api
    whole = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=LONG, temperature=0
    )
    for include in (True, False):
        chunks, steps_at_first = [], None
        for c in client.chat.completions.create(
            model="calc",
            messages=HI,
            max_tokens=LONG,
            temperature=0,
            stream=True,
            stream_options={"include_usage": include},
        ):
            if steps_at_first is None and c.choices and c.choices[0].delta.content:
                steps_at_first = served.server.steps
            chunks.append(c)
        assert served.server.steps - steps_at_first > LONG // 2  # most came after the first
        assert chunks[-1].usage.completion_tokens == LONG
        assert all(c.usage is None for c in chunks[:-1])
        assert (
            "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            == whole.choices[0].message.content
        )
    chunks = list(
        client.completions.create(
            model="calc", prompt="Once upon", max_tokens=9, temperature=0, stream=True, logprobs=0
        )
    )
    whole = client.completions.create(
        model="calc", prompt="Once upon", max_tokens=9, temperature=0, logprobs=0
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert (
        sum(
            len(c.choices[0].logprobs.token_logprobs)
            for c in chunks
            if c.choices and c.choices[0].logprobs
        )
        == 9
    )
    assert chunks[-1].usage.completion_tokens == 9


def test_a_stop_string_never_reaches_a_stream(api):
    _, client = api
    full = (
        client.completions.create(model="calc", prompt="Once upon", max_tokens=12, temperature=0)
        .choices[0]
        .text
    )
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    chunks = list(
        client.completions.create(
            model="calc", prompt="Once upon", max_tokens=12, temperature=0, stream=True, stop=[stop]
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full[: full.index(stop)]


def test_an_api_key_guards_v1(api):
    served, _ = api
    with ServerThread(build_app(served, api_key="sekret")) as url:
        good = openai.OpenAI(base_url=url, api_key="sekret", max_retries=0)
        assert [m.id for m in good.models.list().data] == ["calc", "calc-base"]
        for key in ("wrong", "sekret2"):
            bad = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                bad.chat.completions.create(model="calc", messages=HI, max_tokens=2)
        health = url.removesuffix("/v1") + "/health"
        assert urllib.request.urlopen(health).status == 200


def test_bad_token_ids_and_roles_get_a_400_without_a_traceback(api, caplog):
    _, client = api
    with caplog.at_level(logging.WARNING):
        with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
            client.completions.create(model="calc", prompt=[1, 2, 10**7], max_tokens=2)
        with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
            client.completions.create(model="calc", prompt=[-1], max_tokens=2)
        with pytest.raises(openai.BadRequestError, match="unknown role 'wizard'"):
            client.chat.completions.create(
                model="calc", max_tokens=2, messages=[{"role": "wizard", "content": "abracadabra"}]
            )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_streamed_reply_with_tools_carries_its_call_and_the_usage_last(api):
    from .test_app import REVIEW_TOOL

    _, client = api
    chunks = list(
        client.chat.completions.create(
            model="calc",
            messages=HI,
            max_tokens=24,
            temperature=0,
            tools=[REVIEW_TOOL],
            tool_choice={"type": "function", "function": {"name": "submit_review"}},
            stream=True,
        )
    )
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert [t.function.name for t in calls] == ["submit_review"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage.completion_tokens > 0
