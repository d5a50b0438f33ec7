"""The model service: environments' own LLM calls reach the live policy (adapter on or off)
through the generation server, a local model, an OpenAI-compatible endpoint, or nothing
(rules); an environment in a child process reaches it through its parent."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from practicum.engine.base import SamplingParams
from practicum.engine.chat import ChatFormat
from practicum.engine.hf import PolicyConfig, load_hf_engine
from practicum.engine.server import GenerationServer
from practicum.engine.service import Completion, ModelService, OpenAIClient, check_spec
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.process_env import ProcessEnv
from practicum.errors import ConfigError

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def live(tiny_model_dir):
    trainable, sampler = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    server = GenerationServer(sampler).start()
    yield trainable, sampler, ModelService(server, ChatFormat(trainable.tokenizer))
    server.stop()


def test_policy_and_base_clients_sample_the_live_weights_with_the_adapter_on_and_off(live):
    import torch

    trainable, sampler, service = live
    chat = service.chat
    ids = chat.render(MESSAGES)
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=chat.stop_ids())
    untrained = sampler.generate([ids], params)[0].token_ids
    assert service.client("base").complete(MESSAGES, GREEDY).token_ids == untrained
    torch.manual_seed(0)
    for p in trainable.trainable_parameters():  # train, then publish the new weights
        torch.nn.init.normal_(p, std=0.05)
    with service.server.updating():
        service.server.publish(trainable.export_weights(1))
    trained = service.client("policy").complete(MESSAGES, GREEDY)
    assert trained.token_ids == sampler.generate([ids], params)[0].token_ids != untrained
    assert service.complete(MESSAGES, GREEDY, adapter=False).token_ids == untrained
    assert trained.text == trainable.tokenizer.decode(trained.token_ids, skip_special_tokens=True)


def test_local_client_loads_its_own_frozen_model(live, tiny_model_dir):
    _, sampler, service = live
    local = service.client(f"local:{tiny_model_dir}")
    assert local is service.client(f"local:{tiny_model_dir}")  # one copy per process
    ids = service.chat.render(MESSAGES)
    params = SamplingParams(
        temperature=0.0, max_new_tokens=8, stop_token_ids=service.chat.stop_ids()
    )
    assert (
        local.complete(MESSAGES, GREEDY).token_ids
        == sampler.generate([ids], params, adapter=False)[0].token_ids
    )


def test_specs_are_validated_and_rules_means_no_model():
    assert ModelService().client("rules") is None
    for bad in ("polcy", "local:", "openai:http://x", "openai:|m"):
        with pytest.raises(ConfigError, match=r"config error at task\.options\.judge"):
            check_spec(bad, "task.options.judge")


def test_local_models_resolve_at_validation_when_asked(tiny_model_dir, tmp_path):
    check_spec("local:/no/such/model", "k")  # syntax only: resolved when first called
    with pytest.raises(ConfigError, match=r"config error at k: cannot resolve model"):
        check_spec("local:/no/such/model", "k", resolve_local=True)
    check_spec(f"local:{tiny_model_dir}", "k", resolve_local=True)
    check_spec("local:smollm2-135m-instruct", "k", resolve_local=True)  # built-in, unconverted


def test_openai_client_speaks_chat_completions():
    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            seen["path"] = self.path
            seen["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = {"choices": [{"message": {"content": "pong"}, "finish_reason": "stop"}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    http = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.handle_request, daemon=True).start()
    client = ModelService().client(f"openai:http://127.0.0.1:{http.server_port}|tiny")
    assert isinstance(client, OpenAIClient)
    out = client.complete(
        MESSAGES, SamplingParams(temperature=0.0, max_new_tokens=5, stop_strings=("\n",))
    )
    http.server_close()
    assert out.text == "pong" and seen["path"] == "/v1/chat/completions"
    assert seen["body"] == {
        "model": "tiny",
        "messages": MESSAGES,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 5,
        "stop": ["\n"],
    }


def test_an_openai_endpoint_refuses_a_grammar_instead_of_dropping_it():
    client = OpenAIClient("http://127.0.0.1:9", "tiny")  # never reached
    with pytest.raises(ValueError, match="takes no grammar"):
        client.complete(MESSAGES, SamplingParams(grammar="start: /[a-z]+/"))


class RecordingService:
    """Stands in for the trainer's ModelService: answers and records each call."""

    def __init__(self):
        self.calls = []

    def complete(self, messages, params=None, adapter=True):
        self.calls.append(("policy" if adapter else "base", messages[-1]["content"]))
        return Completion(f"{'on' if adapter else 'off'}:{messages[-1]['content']}", [1], "stop")

    def client(self, spec):
        service = self

        class Client:
            def complete(self, messages, params=None):
                service.calls.append((spec, messages[-1]["content"]))
                if spec.startswith("local:broken"):
                    raise OSError("no such model")
                return Completion(f"{spec}:{messages[-1]['content']}", [], "stop")

        return None if spec == "rules" else Client()


class AskingEnv(Env):
    """Asks the model service from inside its (child) process and reports the answers."""

    def __init__(self, models):
        self.models = models

    def reset(self, task: Task, seed: int = 0) -> Start:
        return Start([{"role": "user", "content": "go"}])

    def step(self, action: str) -> StepResult:
        msgs = [{"role": "user", "content": action}]
        answers = [
            self.models.client("base").complete(msgs).text,
            self.models.complete(msgs, adapter=True).text,
            str(self.models.client("rules")),
        ]
        try:
            self.models.client("local:broken").complete(msgs)
        except RuntimeError as e:
            answers.append(str(e))
        return StepResult(" | ".join(answers), done=True)


def test_an_env_in_a_child_process_reaches_the_parents_model_service():
    service = RecordingService()
    env = ProcessEnv(AskingEnv, service, start_method="fork")  # fork: AskingEnv lives here
    try:
        env.reset(Task("t"))
        pid = env.pid
        result = env.step("hello")
    finally:
        env.close()
    assert result.failure is None and pid is not None
    base, policy, rules, broken = result.observation.split(" | ")
    assert (base, policy, rules) == ("off:hello", "on:hello", "None")  # base = adapter off
    assert "model service call failed in the trainer: OSError: no such model" in broken
    assert service.calls == [("base", "hello"), ("policy", "hello"), ("local:broken", "hello")]
