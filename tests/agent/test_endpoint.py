"""The episode-scoped endpoint over HTTP (its Unix socket, no sandbox): keys, recording, tools,
streaming, the base model, refusals."""

import http.client
import json
import socket

import pytest

from practicum.agent.endpoint import AgentEndpoint, CallLimits
from practicum.agent.exactness import check_exactness
from practicum.engine.chat import ChatFormat
from practicum.engine.hf import load_frozen_sampler
from practicum.engine.server import GenerationServer


class _Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(self.unix_path))


def post(endpoint, key, path, body):
    conn = _Unix(endpoint.socket)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", f"/v1/{path}", json.dumps(body), headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    if resp.getheader("content-type", "").startswith("text/event-stream"):
        return resp.status, [
            json.loads(x[6:]) for x in text.split("\n\n") if x.startswith("data: {")
        ]
    return resp.status, json.loads(text)


@pytest.fixture(scope="module")
def endpoint(tiny_model_dir, tmp_path_factory):
    sampler = load_frozen_sampler(str(tiny_model_dir), "float32", "cpu")
    server = GenerationServer(sampler).start()
    log = tmp_path_factory.mktemp("log") / "requests.jsonl"
    ep = AgentEndpoint(
        server,
        ChatFormat(sampler.tokenizer),
        "toy",
        max_seq_len=512,
        learner_temperature=1.0,
        request_log=log,
    ).start()
    yield ep
    ep.stop()
    server.stop()


def chat(endpoint, live, messages, **kw):
    body = {"model": "toy", "messages": messages, "max_tokens": 6, **kw}
    return post(endpoint, live.key, "chat/completions", body)


def test_a_wrong_or_missing_key_is_refused_and_recorded_nowhere(endpoint):
    live = endpoint.open(CallLimits(), seed=0)
    before = endpoint.unauthorized
    msgs = [{"role": "user", "content": "hi"}]
    for key in ("not-a-key", None, live.key + "x"):
        status, body = post(endpoint, key, "chat/completions", {"model": "toy", "messages": msgs})
        assert status == 401 and body["error"]["type"] == "authentication_error"
    assert endpoint.unauthorized == before + 3
    assert live.calls.calls == 0 and live.failure is None and live.admitted == 0
    endpoint.close(live)
    assert (
        post(endpoint, live.key, "chat/completions", {"model": "toy", "messages": msgs})[0] == 401
    )  # closed: its key is dead


def test_calls_continue_their_row_and_match_the_request_log(endpoint):
    live = endpoint.open(CallLimits(), seed=1)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"}]
    for i in range(3):
        status, body = chat(endpoint, live, msgs, logprobs=True)
        assert status == 200, body
        reply = body["choices"][0]["message"]
        msgs += [
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": f"again {i}"},
        ]
        assert len(body["choices"][0]["logprobs"]["content"]) == body["usage"]["completion_tokens"]
    # a streamed reply is recorded the same way
    status, chunks = chat(endpoint, live, msgs, stream=True)
    assert status == 200 and chunks[-1]["usage"]["completion_tokens"] > 0
    endpoint.close(live)
    ep = live.calls.episode("t", "g", episode_id=live.episode_id)
    assert live.calls.calls == 4 and live.calls.continued == 3 and len(ep.segments()) == 1
    report = check_exactness([ep], endpoint.request_log)
    assert report.ok and report.trained_turns == 4, report.problems


def test_an_edited_history_opens_a_new_segment_over_http(endpoint):
    live = endpoint.open(CallLimits(), seed=2)
    msgs = [{"role": "user", "content": "go"}]
    reply = chat(endpoint, live, msgs)[1]["choices"][0]["message"]["content"]
    edited = msgs + [
        {"role": "assistant", "content": reply + " (edited)"},
        {"role": "user", "content": "next"},
    ]
    assert chat(endpoint, live, edited)[0] == 200
    endpoint.close(live)
    assert live.calls.segments == 2 and live.calls.continued == 0
    ep = live.calls.episode("t", "g", episode_id=live.episode_id)
    assert check_exactness([ep], endpoint.request_log).ok


def test_tool_calls_the_base_model_and_other_temperatures(endpoint):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": {
                    "type": "object",
                    "properties": {"cmd": {"type": "string"}},
                    "required": ["cmd"],
                },
            },
        }
    ]
    live = endpoint.open(CallLimits(), seed=3)
    msgs = [{"role": "user", "content": "list files"}]
    status, body = chat(endpoint, live, msgs, tools=tools, tool_choice="required")
    (call,) = body["choices"][0]["message"]["tool_calls"]  # forced: there is one
    assert call["function"]["name"] == "bash" and "cmd" in json.loads(call["function"]["arguments"])
    # the call's opening is context; a filled call's values are logged, never trained
    assert live.calls.calls == 1
    assert chat(endpoint, live, msgs, model="toy-base")[0] == 200
    assert chat(endpoint, live, msgs, temperature=0.5)[0] == 200
    endpoint.close(live)
    ep = live.calls.episode("t", "g")
    assert [t.trained for t in ep.turns] == [True, False, False]
    assert [t.info["call"]["model"] for t in ep.turns] == ["policy", "base", "policy"]
    assert ep.turns[2].info["call"]["sampled_temperature"] == 0.5
    prefix = endpoint.chat.encode('<tool_call>\n{"name": "')
    assert ep.prompt_ids[-len(prefix) :] == prefix  # the forced opening ends the context
    if ep.turns[0].info["filled"]:  # a random model's own call rarely parses
        assert ep.turns[0].trained and len(ep.turns[0].sampled_ids) > 0


def test_refusals_fail_the_episode_with_their_reason(endpoint):
    live = endpoint.open(CallLimits(max_calls=2), seed=4)
    msgs = [{"role": "user", "content": "go"}]
    assert chat(endpoint, live, msgs, n=2)[0] == 400
    assert live.failure.startswith("refused call: n must be 1") and live.ended.is_set()
    assert chat(endpoint, live, msgs)[0] == 409  # failed already
    endpoint.close(live)

    live = endpoint.open(CallLimits(max_calls=2), seed=5)
    assert chat(endpoint, live, msgs)[0] == 200 and chat(endpoint, live, msgs)[0] == 200
    status, body = chat(endpoint, live, msgs)
    assert status == 429 and "more than 2 calls" in live.failure
    endpoint.close(live)

    live = endpoint.open(CallLimits(max_episode_tokens=5), seed=6)
    status, body = chat(endpoint, live, msgs, max_tokens=10**6)
    assert status == 200 and body["usage"]["completion_tokens"] <= 5  # capped to the budget
    assert chat(endpoint, live, msgs)[0] == 429 and "budget of 5" in live.failure
    endpoint.close(live)

    live = endpoint.open(CallLimits(), seed=7)
    assert chat(endpoint, live, msgs, model="gpt-4")[0] == 404
    assert "does not exist" in live.failure
    endpoint.close(live)
