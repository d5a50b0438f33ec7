"""Full fine-tuning with the vLLM sampler (fp32 SmolLM2): every published version reaches the
engine without disk (bytes through collective_rpc, or broadcast over a gloo weight group with
vLLM's worker process) or through a file, and the engine then samples the learner's weights;
every publish ends with the post-sync check (`verify_weights`, on here), which catches the
stale tied head vLLM's own reload leaves; with sleep mode the engine sits out each train step
(on CPU vLLM cannot sleep: the sequencing is the same, the memory stays)."""

import pytest
import torch

from practicum.engine.base import SamplingParams
from practicum.engine.chat import ChatFormat
from practicum.engine.hf import PolicyConfig
from practicum.engine.server import GenerationServer
from practicum.engine.vllm import load_vllm_engine
from practicum.engine.vllm_sampler import VLLMOptions
from practicum.engine.weight_check import StaleWeights, fingerprints

CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def engine(smollm2_dir):
    trainable, sampler = load_vllm_engine(
        PolicyConfig(model=str(smollm2_dir), dtype="float32", lora=False, seed=0),
        VLLMOptions(max_model_len=512, kv_cache_gb=1, enable_sleep_mode=True, verify_weights=True),
    )
    yield trainable, sampler, ChatFormat(trainable.tokenizer)
    sampler.close()


def gap(trainable, sampler, prompt, seed):
    s = sampler.generate(
        [prompt], SamplingParams(temperature=1.0, max_new_tokens=12), seeds=[seed]
    )[0]
    ids = torch.tensor([prompt + s.token_ids])
    with torch.no_grad():
        lp = trainable.token_logprobs(ids, torch.ones_like(ids))[0, len(prompt) :].tolist()
    return max(abs(a - b) for a, b in zip(s.logprobs, lp))


REPLIES: list[tuple[list[int], list[int]]] = []
"""(base, perturbed) greedy replies of each weight_sync path that ran: all must be equal."""


@pytest.mark.parametrize("sync", ["memory", "file", "broadcast", "broadcast-ipc"])
def test_full_weights_reach_the_engine_in_memory_by_file_and_by_broadcast(engine, sync):
    """Every path serves each published version: greedy replies change with the weights (to
    the same reply on every path) and come back with them, and sampled log-probs are the
    learner's. broadcast forms its gloo group with vLLM's worker process once and keeps it;
    with the ipc transport the worker copies each bucket out of shared memory."""
    trainable, sampler, chat = engine
    sampler.options.weight_sync, _, transport = sync.partition("-")
    sampler.options.weight_transport = transport or "auto"
    prompt = chat.render(CAPITAL)
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    original = {k: v.clone() for k, v in trainable.model.state_dict().items()}
    sampler.load_weights(trainable.export_weights(0))
    base = sampler.generate([prompt], greedy)[0].token_ids
    target = sampler._target
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in trainable.model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    sampler.load_weights(trainable.export_weights(1))
    assert sampler.version == 1
    perturbed = sampler.generate([prompt], greedy)[0].token_ids
    assert perturbed != base
    assert gap(trainable, sampler, prompt, 5) < 2e-3  # the engine samples the learner's weights
    with torch.no_grad():
        trainable.model.load_state_dict(original)
    sampler.load_weights(trainable.export_weights(2))
    assert sampler.generate([prompt], greedy)[0].token_ids == base
    REPLIES.append((base, perturbed))
    assert REPLIES[-1] == REPLIES[0]  # the same weights served whichever way they travelled
    if sync.startswith("broadcast"):
        assert target is not None and target.backend == "gloo" and sampler._target is target
        assert target.transport == (transport or "collective")


def test_with_sleep_mode_the_engine_sits_out_the_train_step(engine):
    trainable, sampler, chat = engine
    prompt = chat.render(CAPITAL)
    greedy = SamplingParams(temperature=0, max_new_tokens=4)
    assert sampler.shares_trainable(True)  # its calls wait for the train step
    server = GenerationServer(sampler).start()
    try:
        server.generate(prompt, greedy)
        with server.training():
            assert sampler.asleep
            with pytest.raises(RuntimeError, match="sleeps while the learner trains"):
                sampler.generate([prompt], greedy)
            waiting = server.submit(prompt, greedy)
        assert server.awaits_weights and sampler.asleep  # full weights: the publish wakes it
        with server.updating():
            server.publish(trainable.export_weights(3))
        sample, _ = waiting.result(timeout=600)
        assert not sampler.asleep and sampler.version == 3 and sample.token_ids
    finally:
        server.stop()


def test_the_post_sync_check_catches_the_tied_head_vllms_own_reload_leaves(engine, tmp_path):
    """SmolLM2 ties lm_head to the embedding. vLLM's own reload (from a folder, as its docs
    show) refreshes the embedding but not the packed copy the CPU kernel of the tied head
    computes with: the check names exactly that parameter; the sampler's reload (which
    re-ties and re-packs it) then passes the check."""
    from safetensors.torch import save_file

    trainable, sampler, _ = engine
    original = {k: v.clone() for k, v in trainable.model.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in trainable.model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    update = trainable.export_weights(4)
    save_file(
        {k: v.contiguous() for k, v in update.tensors.items() if k != "lm_head.weight"},
        tmp_path / "model.safetensors",
    )
    sampler.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(tmp_path)})
    with pytest.raises(
        StaleWeights,
        match=r"1 of vLLM's parameters are not the learner's: "
        r"lm_head.weight: differs from what was sent",
    ):
        sampler.check_weights(fingerprints(update.tensors, sampler.dtype))
    sampler.load_weights(update)  # checked: it would raise
    with torch.no_grad():
        trainable.model.load_state_dict(original)
    sampler.load_weights(trainable.export_weights(5))
