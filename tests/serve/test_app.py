"""`practicum serve` answers the official openai client: models, chat (tools, forced
tool_choice, streaming, seeds, stops, logprobs), completions, usage, batching and errors; the
policy (adapter on) and its base (adapter off) side by side."""

import json
import threading

import openai
import pytest

from practicum.engine.base import SamplingParams

HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
REVIEW_TOOL = {
    "type": "function",
    "function": {
        "name": "submit_review",
        "description": "Submit a review of the run.",
        "parameters": {
            "type": "object",
            "properties": {
                "is_bug": {"type": "boolean"},
                "summary": {"type": "string"},
                "metric": {"type": ["number", "null"]},
                "lower_is_better": {"type": "boolean"},
            },
            "required": ["is_bug", "summary", "metric", "lower_is_better"],
        },
    },
}


def direct(served, messages, max_new, adapter):
    """The same greedy turn sampled straight from the engine."""
    ids = served.chat.render(messages)
    params = SamplingParams(
        temperature=0.0, max_new_tokens=max_new, stop_token_ids=served.chat.stop_ids()
    )
    return ids, served.server.generate(ids, params, adapter=adapter)[0]


def test_models_lists_the_policy_and_its_base(api):
    _, client = api
    assert [m.id for m in client.models.list().data] == ["calc", "calc-base"]
    assert client.models.retrieve("calc-base").parent == "calc"


def test_chat_returns_the_engines_own_turn_with_exact_usage(api):
    served, client = api
    for model, adapter in (("calc", True), ("calc-base", False)):
        ids, sample = direct(served, HI, 12, adapter)
        r = client.chat.completions.create(model=model, messages=HI, max_tokens=12, temperature=0)
        assert r.choices[0].message.content == sample.text
        assert r.choices[0].finish_reason == sample.finish_reason
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (
            len(ids),
            len(sample.token_ids),
        )
        assert r.usage.total_tokens == len(ids) + len(sample.token_ids)
    policy = (
        client.chat.completions.create(model="calc", messages=HI, max_tokens=12, temperature=0)
        .choices[0]
        .message.content
    )
    base = (
        client.chat.completions.create(model="calc-base", messages=HI, max_tokens=12, temperature=0)
        .choices[0]
        .message.content
    )
    assert policy != base  # the adapter is on for one and off for the other


def test_stream_carries_the_same_text_and_usage(api):
    _, client = api
    whole = client.chat.completions.create(model="calc", messages=HI, max_tokens=10, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="calc",
            messages=HI,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[
        0
    ].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_health_counts_the_tokens_served_per_model(api):
    import urllib.request

    served, client = api
    health = str(client.base_url).rstrip("/").removesuffix("/v1") + "/health"
    usage = lambda: json.loads(urllib.request.urlopen(health).read())["usage"]  # noqa: E731
    before = usage().get("calc-base", {})
    r = client.chat.completions.create(
        model="calc-base", messages=HI, max_tokens=5, n=2, temperature=0
    )
    after = usage()["calc-base"]
    assert after["samples"] - before.get("samples", 0) == 2
    assert after["prompt_tokens"] - before.get("prompt_tokens", 0) == 2 * r.usage.prompt_tokens
    assert (
        after["completion_tokens"] - before.get("completion_tokens", 0) == r.usage.completion_tokens
    )


def test_seeds_repeat_and_n_gives_independent_choices(api):
    _, client = api
    two = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=8, temperature=1.0, seed=7, n=2
    )
    one = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=8, temperature=1.0, seed=7
    )
    assert one.choices[0].message.content == two.choices[0].message.content
    assert two.choices[0].message.content != two.choices[1].message.content
    assert two.usage.completion_tokens == 16


def test_stop_string_ends_the_reply_and_is_left_out(api):
    _, client = api
    full = (
        client.chat.completions.create(model="calc", messages=HI, max_tokens=12, temperature=0)
        .choices[0]
        .message.content
    )
    stop = full.split()[2]  # a word from the middle of the greedy reply
    r = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=12, temperature=0, stop=[stop]
    )
    assert r.choices[0].message.content == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_chat_logprobs_are_the_behaviour_logprobs(api):
    served, client = api
    r = client.chat.completions.create(
        model="calc", messages=HI, max_tokens=6, temperature=0.7, seed=3, logprobs=True
    )
    lps = [t.logprob for t in r.choices[0].logprobs.content]
    assert len(lps) == r.usage.completion_tokens and all(lp < 0 for lp in lps)
    ids = served.chat.render(HI)
    params = SamplingParams(
        temperature=0.7, max_new_tokens=6, stop_token_ids=served.chat.stop_ids()
    )
    sample = served.server.generate(ids, params, seed=3)[0]
    assert lps == pytest.approx(sample.logprobs, abs=1e-5)


def test_forced_tool_choice_always_returns_a_call_that_fits_the_schema(api):
    _, client = api
    for model in ("calc", "calc-base"):
        r = client.chat.completions.create(
            model=model,
            messages=HI,
            max_tokens=24,
            temperature=0,
            tools=[REVIEW_TOOL],
            tool_choice={"type": "function", "function": {"name": "submit_review"}},
        )
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert call.function.name == "submit_review" and call.id.startswith("call_")
        args = json.loads(call.function.arguments)
        assert set(args) == {"is_bug", "summary", "metric", "lower_is_better"}
        assert isinstance(args["is_bug"], bool) and isinstance(args["summary"], str)
        assert isinstance(args["lower_is_better"], bool)
        assert args["metric"] is None or isinstance(args["metric"], (int, float))
    required = client.chat.completions.create(
        model="calc",
        messages=HI,
        max_tokens=24,
        temperature=0,
        tools=[REVIEW_TOOL],
        tool_choice="required",
    )
    assert required.choices[0].message.tool_calls[0].function.name == "submit_review"


def test_a_conversation_with_tool_calls_and_results_renders(api):
    _, client = api
    history = HI + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "submit_review", "arguments": '{"is_bug": true}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "received"},
    ]
    r = client.chat.completions.create(
        model="calc", messages=history, max_tokens=4, temperature=0, tools=[REVIEW_TOOL]
    )
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert (
        r.usage.prompt_tokens
        > client.chat.completions.create(
            model="calc", messages=HI, max_tokens=1, temperature=0
        ).usage.prompt_tokens
    )


def test_completions_with_text_and_token_prompts_echo_and_logprobs(api):
    served, client = api
    r = client.completions.create(
        model="calc", prompt="The answer is", max_tokens=5, temperature=0, logprobs=0, echo=True
    )
    c = r.choices[0]
    assert c.text.startswith("The answer is") and r.usage.completion_tokens == 5
    assert len(c.logprobs.token_logprobs) == 5 and c.logprobs.text_offset[0] == 13
    ids = served.chat.encode("The answer is")
    by_ids = client.completions.create(model="calc", prompt=ids, max_tokens=5, temperature=0)
    assert "The answer is" + by_ids.choices[0].text == c.text
    assert by_ids.usage.prompt_tokens == len(ids)
    many = client.completions.create(
        model="calc-base", prompt=["a", "b c"], max_tokens=3, temperature=0, n=2
    )
    assert len(many.choices) == 4 and many.usage.completion_tokens == 12
    streamed = list(
        client.completions.create(
            model="calc", prompt=ids, max_tokens=5, temperature=0, stream=True
        )
    )
    assert "".join(s.choices[0].text for s in streamed) == by_ids.choices[0].text


def test_concurrent_requests_are_sampled_in_shared_batches(api):
    served, client = api
    served.server.peak_rows = 0
    out: list = [None] * 8
    barrier = threading.Barrier(8)

    def ask(i):
        barrier.wait()
        out[i] = (
            client.chat.completions.create(
                model="calc",
                messages=[{"role": "user", "content": f"Question {i}"}],
                max_tokens=6,
                temperature=0,
            )
            .choices[0]
            .message.content
        )

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(o, str) for o in out)
    assert served.server.peak_rows > 1  # requests decoded side by side


def test_errors_come_back_in_the_openai_format(api):
    _, client = api
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4", messages=HI)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model="calc", prompt=[5] * 1100, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="not in tools"):
        client.chat.completions.create(
            model="calc",
            messages=HI,
            tools=[REVIEW_TOOL],
            tool_choice={"type": "function", "function": {"name": "rm_rf"}},
        )
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="calc", messages=[])
