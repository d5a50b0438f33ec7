import math

import pytest
import torch

from practicum.engine.base import SamplingParams
from practicum.engine.device import auto_dtype
from practicum.engine.hf import Policy, PolicyConfig
from practicum.engine.sampling import sample_next, top_p_filter


@pytest.fixture(scope="module")
def policy(tiny_model_dir) -> Policy:
    """fp32 LoRA policy on the tiny model; tests that train build their own."""
    return Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))


@pytest.fixture(scope="module")
def prompts(policy) -> list[list[int]]:
    tok = policy.tokenizer
    texts = ["Hello there, how are you today?", "Hi", "def f(x):\n    return"]
    return [tok(t).input_ids for t in texts]


def greedy(n: int = 12, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_new_tokens=n, **kw)


def padded(rows: list[list[int]], side: str) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[i, sl], mask[i, sl] = torch.tensor(r), 1
    return ids, mask


def one_adam_step(policy: Policy, ids: list[int], lr: float = 1e-2) -> None:
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr)
    x = torch.tensor([ids])
    loss = -policy.token_logprobs(x, torch.ones_like(x)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


def logprobs_of(policy: Policy, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        return policy.token_logprobs(x, torch.ones_like(x))[0]


# -- sampling math ----------------------------------------------------------------------------
def test_top_p_keeps_smallest_set_reaching_the_mass():
    p = torch.tensor([[0.2, 0.5, 0.3]])
    assert torch.equal(top_p_filter(p, 0.7), torch.tensor([[0.0, 0.5, 0.3]]))
    assert torch.equal(top_p_filter(p, 0.8), torch.tensor([[0.0, 0.5, 0.3]]))
    assert torch.equal(top_p_filter(p, 0.81), torch.tensor([[0.2, 0.5, 0.3]]))
    assert torch.equal(top_p_filter(p, 0.01), torch.tensor([[0.0, 0.5, 0.0]]))


def test_exponential_race_samples_the_softmax_distribution():
    probs = torch.tensor([0.1, 0.2, 0.7])
    logits = probs.log().expand(20000, 3).contiguous()
    g = torch.Generator().manual_seed(0)
    gens = [g] * 20000  # one shared generator: 20000 independent draws
    tok, lp = sample_next(logits, 1.0, 1.0, gens)
    freq = torch.bincount(tok, minlength=3) / 20000
    assert torch.allclose(freq, probs, atol=0.015)
    assert torch.allclose(lp, probs.log()[tok], atol=1e-6)


def test_greedy_reports_temperature_one_logprobs():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    tok, lp = sample_next(logits, 0.0, 1.0, None)
    assert tok.item() == 0
    assert lp.item() == pytest.approx(2.0 - math.log(math.e**2 + math.e + 1), abs=1e-6)


def test_bad_sampling_params_are_named(policy, prompts):
    with pytest.raises(ValueError, match="top_p"):
        policy.generate(prompts, SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="temperature"):
        policy.generate(prompts, SamplingParams(temperature=-1.0))
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        policy.generate([[1], []], SamplingParams())


# -- generation ---------------------------------------------------------------------------------
def test_samples_have_matching_ids_logprobs_and_text(policy, prompts):
    out = policy.generate(prompts, SamplingParams(max_new_tokens=9, seed=0))
    assert len(out) == len(prompts)
    for s in out:
        assert 1 <= len(s.token_ids) <= 9 and len(s.logprobs) == len(s.token_ids)
        assert all(lp <= 0 for lp in s.logprobs)
        assert s.text == policy.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        assert s.finish_reason == ("length" if len(s.token_ids) == 9 else "stop")


def test_greedy_is_deterministic_and_independent_of_batching(policy, prompts):
    batch = policy.generate(prompts, greedy())
    again = policy.generate(prompts, greedy())
    alone = [policy.generate([p], greedy())[0] for p in prompts]
    assert (
        [s.token_ids for s in batch] == [s.token_ids for s in again] == [s.token_ids for s in alone]
    )
    for b, a in zip(batch, alone):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


def test_seeded_sampling_is_reproducible_per_row(policy, prompts):
    params = SamplingParams(max_new_tokens=10, seed=7)
    a = policy.generate(prompts, params)
    b = policy.generate(prompts, params)
    first_alone = policy.generate(prompts[:1], params)[0]
    other_seed = policy.generate(prompts, SamplingParams(max_new_tokens=10, seed=8))
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert first_alone.token_ids == a[0].token_ids  # row 0 draws from seed + 0 whatever the batch
    assert [s.token_ids for s in a] != [s.token_ids for s in other_seed]


def test_stop_token_id_is_kept_and_ends_the_sequence(policy, prompts):
    ref = policy.generate(prompts[:1], greedy(12))[0].token_ids
    k = next(i for i in range(3, len(ref)) if ref[i] not in ref[:i])
    out = policy.generate(prompts[:1], greedy(12, stop_token_ids=[ref[k]]))[0]
    assert out.token_ids == ref[: k + 1]
    assert out.finish_reason == "stop"


def test_eos_ends_the_sequence(policy, prompts, monkeypatch):
    ref = policy.generate(prompts[:1], greedy(12))[0].token_ids
    monkeypatch.setattr(policy, "eos_ids", {ref[4]} if ref[4] not in ref[:4] else {ref[0]})
    out = policy.generate(prompts[:1], greedy(12))[0]
    assert out.token_ids[-1] in policy.eos_ids and out.token_ids == ref[: len(out.token_ids)]
    assert out.finish_reason == "stop"


def test_stop_string_ends_after_the_completing_token(policy, prompts):
    tok = policy.tokenizer
    ref = policy.generate(prompts[:1], greedy(12))[0].token_ids
    for k in range(2, len(ref)):  # a stop string completed exactly by token k
        stop = tok.decode(ref[: k + 1])[-3:]
        if stop.strip() and stop not in tok.decode(ref[:k]):
            break
    out = policy.generate(prompts[:1], greedy(12, stop_strings=[stop]))[0]
    assert out.token_ids == ref[: k + 1]
    assert out.text.endswith(stop) and out.finish_reason == "stop"


def test_finished_rows_leave_the_batch_without_disturbing_others(policy, prompts):
    ref = policy.generate(prompts, greedy(10))
    stop = ref[1].token_ids[1]  # row 1 stops after 2 tokens, the others (probably) run on
    out = policy.generate(prompts, greedy(10, stop_token_ids=[stop]))
    for r, o in zip(ref, out):
        cut = r.token_ids.index(stop) + 1 if stop in r.token_ids else len(r.token_ids)
        assert o.token_ids == r.token_ids[:cut]
        assert o.logprobs == pytest.approx(r.logprobs[:cut], abs=1e-4)


def test_zero_new_tokens_gives_empty_samples(policy, prompts):
    out = policy.generate(prompts, SamplingParams(max_new_tokens=0))
    assert [s.token_ids for s in out] == [[], [], []]


# -- log-prob agreement -------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_generate_logprobs_match_token_logprobs_in_padded_batches(policy, prompts, temperature):
    out = policy.generate(
        prompts, SamplingParams(temperature=temperature, max_new_tokens=15, seed=3)
    )
    rows = [p + s.token_ids for p, s in zip(prompts, out)]
    for side in ("left", "right"):
        ids, mask = padded(rows, side)
        with torch.no_grad():
            lp = policy.token_logprobs(ids, mask, temperature=temperature)
        for i, (p, s) in enumerate(zip(prompts, out)):
            start = ids.shape[1] - len(rows[i]) if side == "left" else 0
            got = lp[i, start + len(p) : start + len(rows[i])]
            assert torch.allclose(got, torch.tensor(s.logprobs), atol=1e-4), side


def test_token_logprobs_zero_position_zero_padding_and_entropy_bounds(policy, prompts):
    ids, mask = padded(prompts, "left")
    with torch.no_grad():
        lp, ent = policy.token_logprobs(ids, mask, return_entropy=True)
    first_real = mask.argmax(dim=1)
    assert torch.all(lp[torch.arange(3), first_real] == 0) and torch.all(lp[mask == 0] == 0)
    assert torch.all(lp <= 0) and torch.all(ent >= 0)
    assert torch.all(ent <= math.log(len(policy.tokenizer)) + 1e-4)
    # a row alone equals the same row inside the left-padded batch
    alone = logprobs_of(policy, prompts[0])
    assert torch.allclose(lp[0, ids.shape[1] - len(prompts[0]) :], alone, atol=1e-5)


def test_entropy_is_that_of_the_tempered_distribution(policy, prompts):
    x = torch.tensor([prompts[0]])
    with torch.no_grad():
        _, ent = policy.token_logprobs(x, torch.ones_like(x), temperature=0.5, return_entropy=True)
        z = policy.model(x).logits[0, :-1].float() / 0.5
    expected = -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)
    assert torch.allclose(ent[0, 1:], expected, atol=1e-4)


def test_chunked_logit_rows_give_the_same_logprobs_entropy_and_gradients(tiny_model_dir, prompts):
    """token_logprobs projects to the vocabulary a few rows at a time (recomputed in backward);
    results must not depend on the chunk size. Full fine-tuning: the head weight gets gradients."""
    ids, mask = padded(prompts, "left")
    outs = []
    for rows in (10_000, 3, 1):  # one chunk; 1 position x 3 rows per chunk; rows < batch
        pol = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32", lora=False))
        pol.logit_chunk_rows = rows
        lp, ent = pol.token_logprobs(ids, mask, temperature=0.7, return_entropy=True)
        (lp.sum() + 0.1 * ent.sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in pol.trainable_parameters()])
        outs.append((lp.detach(), ent.detach(), grads))
    for lp, ent, grads in outs[1:]:
        assert torch.allclose(lp, outs[0][0], atol=1e-5)
        assert torch.allclose(ent, outs[0][1], atol=1e-5)
        assert (grads - outs[0][2]).norm() <= 1e-5 * outs[0][2].norm()  # fp32 sums reorder
    assert outs[0][2].abs().sum() > 0


def test_merged_sampling_follows_the_adapter_and_never_touches_the_base(tiny_model_dir, prompts):
    """Sampling runs on a merged copy (W + BA); it must track every adapter change, give the
    same tokens and log-probs as the unmerged model, and leave frozen_base exactly frozen."""
    merged = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    plain = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32", merged_sampling=False))
    assert merged._sampler is not None and plain._sampler is None
    base_before = merged.generate(prompts, greedy())
    for pol in (merged, plain):  # the same non-zero adapter in both
        torch.manual_seed(0)
        for p in pol.trainable_parameters():
            torch.nn.init.normal_(p, std=0.05)
    for _ in range(2):  # the merged copy refreshes after each in-place update
        a = merged.generate(prompts, SamplingParams(max_new_tokens=8, seed=3))
        b = plain.generate(prompts, SamplingParams(max_new_tokens=8, seed=3))
        assert [s.token_ids for s in a] == [s.token_ids for s in b]
        for sa, sb in zip(a, b):
            assert torch.allclose(torch.tensor(sa.logprobs), torch.tensor(sb.logprobs), atol=1e-4)
        one_adam_step(merged, prompts[0])
        one_adam_step(plain, prompts[0])
    assert [s.token_ids for s in merged.generate(prompts, greedy())] != [
        s.token_ids for s in base_before
    ]
    with merged.frozen_base():
        assert [s.token_ids for s in merged.generate(prompts, greedy())] == [
            s.token_ids for s in base_before
        ]


def test_lm_head_is_not_a_lora_target():
    with pytest.raises(ValueError, match="lm_head"):
        PolicyConfig(lora_target_modules=["q_proj", "lm_head"])


# -- training -----------------------------------------------------------------------------------
def test_lora_trains_only_the_adapter(policy):
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    # r * (in + out) per adapted layer:
    # q 64->64, k,v 64->32, o 64->64, gate,up 64->128, down 128->64
    per_layer = 16 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64))
    assert sum(p.numel() for p in policy.trainable_parameters()) == 2 * per_layer


def test_frozen_base_gives_original_logprobs_after_training(tiny_model_dir, prompts):
    pol = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    ids = prompts[0]
    before = logprobs_of(pol, ids)
    one_adam_step(pol, ids)
    after = logprobs_of(pol, ids)
    assert (after - before).abs().max() > 1e-2  # the adapter moved the policy
    with pol.frozen_base() as ref:
        assert torch.allclose(logprobs_of(ref, ids), before, atol=1e-6)
        sample = ref.generate([ids], greedy(5))[0]  # the engine also samples from the base
        base_lp = logprobs_of(ref, ids + sample.token_ids)[len(ids) :]
    assert torch.allclose(base_lp, torch.tensor(sample.logprobs), atol=1e-4)
    assert torch.allclose(logprobs_of(pol, ids), after)  # adapter back on after the block


def test_save_and_load_restore_outputs_and_version(tiny_model_dir, prompts, tmp_path):
    pol = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    one_adam_step(pol, prompts[0])
    pol.bump_version()
    assert pol.bump_version() == 2
    pol.save(tmp_path / "ckpt")
    pol.save(tmp_path / "ckpt")  # overwriting an existing checkpoint works
    trained = logprobs_of(pol, prompts[0])

    fresh = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    assert not torch.allclose(logprobs_of(fresh, prompts[0]), trained, atol=1e-3)
    fresh.load_weights(tmp_path / "ckpt")
    assert fresh.version == 2
    assert torch.allclose(logprobs_of(fresh, prompts[0]), trained, atol=1e-6)
    assert (tmp_path / "ckpt" / "adapter_config.json").is_file()
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()


def test_full_finetuning_trains_every_parameter(tiny_model_dir, prompts, tmp_path):
    pol = Policy(PolicyConfig(model=str(tiny_model_dir), lora=False))
    assert pol.dtype == torch.float32  # "auto" keeps full fine-tuning in fp32
    params = list(pol.model.parameters())
    assert len(pol.trainable_parameters()) == len(params)
    embed = pol.model.get_input_embeddings().weight.detach().clone()
    one_adam_step(pol, prompts[0])
    assert not torch.equal(pol.model.get_input_embeddings().weight, embed)
    with pytest.raises(RuntimeError, match="needs its own copy"), pol.frozen_base():
        pass
    pol.bump_version()
    pol.save(tmp_path / "full")
    fresh = Policy(PolicyConfig(model=str(tiny_model_dir), lora=False))
    fresh.load_weights(tmp_path / "full")
    assert fresh.version == 1
    assert torch.allclose(logprobs_of(fresh, prompts[0]), logprobs_of(pol, prompts[0]), atol=1e-6)
    with pytest.raises(ValueError, match="lora=False"):
        Policy(PolicyConfig(model=str(tiny_model_dir))).load_weights(tmp_path / "full")


def test_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir, prompts):
    grads = []
    for ckpt in (False, True):
        pol = Policy(
            PolicyConfig(model=str(tiny_model_dir), dtype="float32", gradient_checkpointing=ckpt)
        )
        layers = pol.model.get_base_model().model.layers
        assert all(layer.gradient_checkpointing == ckpt for layer in layers)
        torch.manual_seed(0)
        for (
            p
        ) in pol.trainable_parameters():  # make lora_B non-zero so every adapter gets a gradient
            torch.nn.init.normal_(p, std=0.02)
        x = torch.tensor([prompts[0]])
        pol.token_logprobs(x, torch.ones_like(x)).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in pol.trainable_parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert len(pol.generate(prompts[:1], greedy(3))[0].token_ids) == 3  # KV cache still usable


def test_bf16_generate_and_token_logprobs_roughly_agree(tiny_model_dir, prompts):
    pol = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="bfloat16"))
    out = pol.generate(prompts, SamplingParams(max_new_tokens=10, seed=0))
    for p, s in zip(prompts, out):
        got = logprobs_of(pol, p + s.token_ids)[len(p) :]
        assert torch.allclose(got, torch.tensor(s.logprobs), atol=0.1)


def test_auto_dtype_is_fp32_for_full_finetuning():
    assert auto_dtype(torch.device("cpu"), lora=False) == torch.float32
    assert auto_dtype(torch.device("cpu"), lora=True) in (torch.float32, torch.bfloat16)


# -- the real model -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_answers_a_chat_prompt(smollm2_dir):
    pol = Policy(PolicyConfig(model=str(smollm2_dir), dtype="float32"))
    tok = pol.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    out = pol.generate([prompt], greedy(24))[0]
    words = out.text.split()
    assert len(words) >= 2 and sum(w.isascii() for w in words) == len(words)
    assert "Paris" in out.text
    got = logprobs_of(pol, prompt + out.token_ids)[len(prompt) :]
    assert torch.allclose(got, torch.tensor(out.logprobs), atol=1e-3)
