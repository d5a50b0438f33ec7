"""The HF engine: a sampler (generate, stops, seeds, adapter off, published weights) and a
trainable (differentiable log-probs, frozen base, save/load), on the tiny model; one test on the
real SmolLM2."""

import math
import random
from types import SimpleNamespace

import pytest
import torch

from practicum.engine.base import SamplingParams
from practicum.engine.hf import PolicyConfig, load_frozen_sampler, load_hf_engine
from practicum.engine.hf_model import FrozenReference, load_lm, load_tokenizer
from practicum.engine.hf_sampler import HFSampler
from practicum.engine.hf_trainable import HFTrainable
from practicum.errors import ConfigError, PracticumError
from tests.fake_device import DEVICE, on_fake_device


def build(tiny_model_dir, **kw):
    return load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32", **kw))


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    """fp32 LoRA (trainable, sampler) on the tiny model; tests that train build their own."""
    return build(tiny_model_dir)


@pytest.fixture(scope="module")
def sampler(engine):
    return engine[1]


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    tok = engine[0].tokenizer
    return [
        tok(t).input_ids for t in ["Hello there, how are you today?", "Hi", "def f(x):\n    return"]
    ]


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


def one_adam_step(trainable, ids: list[int], lr: float = 1e-2) -> None:
    opt = torch.optim.AdamW(trainable.trainable_parameters(), lr=lr)
    x = torch.tensor([ids])
    (-trainable.token_logprobs(x, torch.ones_like(x)).sum()).backward()
    opt.step()
    opt.zero_grad()


def logprobs_of(trainable, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        return trainable.token_logprobs(x, torch.ones_like(x))[0]


def tokens(samples) -> list[list[int]]:
    return [s.token_ids for s in samples]


# -- sampling --------------------------------------------------------------------------------------
def test_bad_sampling_params_are_named(sampler, prompts):
    with pytest.raises(ValueError, match="top_p"):
        sampler.generate(prompts, SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="temperature"):
        sampler.generate(prompts, SamplingParams(temperature=-1.0))
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        sampler.generate([[1], []], SamplingParams())
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        sampler.generate(prompts, SamplingParams(), seeds=[1, 2])


def test_samples_have_matching_ids_logprobs_and_text(sampler, prompts):
    out = sampler.generate(prompts, SamplingParams(max_new_tokens=9), seeds=[0, 1, 2])
    assert len(out) == len(prompts)
    for s in out:
        assert 1 <= len(s.token_ids) <= 9 and len(s.logprobs) == len(s.token_ids)
        assert all(lp <= 0 for lp in s.logprobs)
        assert s.text == sampler.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        assert s.finish_reason == ("length" if len(s.token_ids) == 9 else "stop")


def test_greedy_is_deterministic_and_independent_of_batching(sampler, prompts):
    batch = sampler.generate(prompts, greedy())
    alone = [sampler.generate([p], greedy())[0] for p in prompts]
    assert tokens(batch) == tokens(sampler.generate(prompts, greedy())) == tokens(alone)
    assert all(lp == 0.0 for s in batch for lp in s.logprobs)  # a point mass


def test_each_row_draws_from_its_own_seed(sampler, prompts):
    params = SamplingParams(max_new_tokens=10)
    a = sampler.generate(prompts, params, seeds=[7, 8, 9])
    assert tokens(a) == tokens(sampler.generate(prompts, params, seeds=[7, 8, 9]))
    # row 0 alone, or with its batch-mates swapped, draws the same tokens
    assert sampler.generate(prompts[:1], params, seeds=[7])[0].token_ids == a[0].token_ids
    swapped = sampler.generate([prompts[2], prompts[0]], params, seeds=[9, 7])
    assert tokens(swapped) == [a[2].token_ids, a[0].token_ids]
    assert tokens(sampler.generate(prompts, params, seeds=[1, 2, 3])) != tokens(a)


def test_identical_prompts_are_prefilled_once_and_sample_as_if_alone(sampler, prompts):
    """A group's repeated prompt is prefilled once (one row per distinct prompt); every row
    still draws from its own seed exactly as it would alone."""
    batch = [prompts[0], prompts[1], prompts[0], prompts[0]]
    params = SamplingParams(max_new_tokens=6)
    shapes = []
    hook = sampler.merged.lm.base_model.register_forward_pre_hook(
        lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    together = sampler.generate(batch, params, seeds=[7, 8, 9, 10])
    hook.remove()
    assert shapes[0] == (2, max(len(prompts[0]), len(prompts[1])))
    assert shapes[1] == (4, 1)  # then every row decodes
    for prompt, seed, got in zip(batch, [7, 8, 9, 10], together):
        alone = sampler.generate([prompt], params, seeds=[seed])[0]
        assert got.token_ids == alone.token_ids
        assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(alone.logprobs), atol=1e-5)
    assert together[0].token_ids != together[2].token_ids  # same prompt, own seed


def test_stop_token_id_is_kept_and_ends_the_sequence(sampler, prompts):
    ref = sampler.generate(prompts[:1], greedy(12))[0].token_ids
    k = next(i for i in range(3, len(ref)) if ref[i] not in ref[:i])
    out = sampler.generate(prompts[:1], greedy(12, stop_token_ids=[ref[k]]))[0]
    assert out.token_ids == ref[: k + 1] and out.finish_reason == "stop"


def test_eos_ends_the_sequence(sampler, prompts, monkeypatch):
    ref = sampler.generate(prompts[:1], greedy(12))[0].token_ids
    monkeypatch.setattr(sampler, "eos_ids", {ref[4]} if ref[4] not in ref[:4] else {ref[0]})
    out = sampler.generate(prompts[:1], greedy(12))[0]
    assert out.token_ids[-1] in sampler.eos_ids and out.token_ids == ref[: len(out.token_ids)]
    assert out.finish_reason == "stop"


def test_stop_string_ends_after_the_completing_token(sampler, prompts):
    tok = sampler.tokenizer
    ref = sampler.generate(prompts[:1], greedy(12))[0].token_ids
    for k in range(2, len(ref)):  # a stop string completed exactly by token k
        stop = tok.decode(ref[: k + 1])[-3:]
        if stop.strip() and stop not in tok.decode(ref[:k]):
            break
    out = sampler.generate(prompts[:1], greedy(12, stop_strings=[stop]))[0]
    assert out.token_ids == ref[: k + 1]
    assert out.text.endswith(stop) and out.finish_reason == "stop"


def whole_text_hit(tok, ids: list[int], stops: tuple[str, ...]) -> bool:
    """The stop-string check on the whole decoded text (what the tail check must equal)."""
    return any(s in tok.decode(ids, skip_special_tokens=True) for s in stops)


def first_hits(tok, ids: list[int], stops: tuple[str, ...]) -> tuple[int | None, int | None]:
    """The first prefix length at which the tail check and the whole-text check hit."""
    tail = next(
        (
            k
            for k in range(1, len(ids) + 1)
            if HFSampler._hit_stop_string(SimpleNamespace(tokenizer=tok), ids[:k], stops)
        ),
        None,
    )
    whole = next((k for k in range(1, len(ids) + 1) if whole_text_hit(tok, ids[:k], stops)), None)
    return tail, whole


def test_a_stop_string_completed_across_tokens_is_found_in_the_tail(sampler):
    tok = sampler.tokenizer
    filler = tok(" the quick brown fox" * 8).input_ids
    answer = tok(" </answer>").input_ids  # ' </', 'answer', '>'
    glyph = tok("x\U00013000y").input_ids  # x, four byte tokens of one character, y
    assert len(answer) == 3 and len(glyph) == 6
    ids = filler + answer + filler
    assert first_hits(tok, ids, ("</answer>",)) == (len(filler) + 3,) * 2
    assert first_hits(tok, ids, ("</ans", "fox the")) == (5, 5)  # " the quick brown fox the"
    ids = filler + glyph
    assert first_hits(tok, ids, ("\U00013000",)) == (len(filler) + 5,) * 2
    special = [tok.eos_token_id] * 40  # decode to nothing: the window widens past them
    ids = filler + answer[:2] + special + answer[2:]
    assert first_hits(tok, ids, ("</answer>",)) == (len(ids),) * 2


def test_stop_strings_in_the_tail_match_the_whole_text_check(sampler):
    # random token sequences mixing words, byte tokens of split characters and special tokens;
    # stop strings cut from the final text (spanning token boundaries): both checks first hit
    # at the same token
    tok = sampler.tokenizer
    rng = random.Random(0)
    partial = [i for i in range(300) if "\ufffd" in tok.decode([i])]
    pool = (
        tok("Hi 🙂 café </answer> x\U00013000y done.\n\nAnswer: 42").input_ids
        + partial
        + [tok.eos_token_id, tok.bos_token_id]
    )
    hits = 0
    for _ in range(150):
        ids = [
            rng.choice(pool) if rng.random() < 0.7 else rng.randrange(len(tok))
            for _ in range(rng.randint(1, 60))
        ]
        text = tok.decode(ids, skip_special_tokens=True)
        stops = tuple(
            s
            for s in (
                text[a : a + rng.randint(1, 12)]
                for a in rng.sample(range(len(text)), min(3, len(text)))
            )
            if "\ufffd" not in s
        )
        tail, whole = first_hits(tok, ids, stops)
        assert tail == whole, (ids, stops)
        hits += whole is not None
    assert hits > 100


def test_the_stop_string_check_decodes_only_the_tail(sampler):
    decoded = []

    class Counting:
        def decode(self, ids, **kw):
            decoded.append(len(ids))
            return sampler.tokenizer.decode(ids, **kw)

    ids = sampler.tokenizer(" the quick brown fox" * 500).input_ids
    assert not HFSampler._hit_stop_string(
        SimpleNamespace(tokenizer=Counting()), ids, ("</answer>",)
    )
    assert len(ids) == 2000 and sum(decoded) < 64


def test_finished_rows_leave_the_batch_without_disturbing_others(sampler, prompts):
    params = SamplingParams(max_new_tokens=10)
    ref = sampler.generate(prompts, params, seeds=[4, 5, 6])
    stop = ref[1].token_ids[1]  # row 1 stops after 2 tokens, the others (probably) run on
    out = sampler.generate(
        prompts, SamplingParams(max_new_tokens=10, stop_token_ids=[stop]), seeds=[4, 5, 6]
    )
    for r, o in zip(ref, out):
        cut = r.token_ids.index(stop) + 1 if stop in r.token_ids else len(r.token_ids)
        assert o.token_ids == r.token_ids[:cut]
        assert o.logprobs == pytest.approx(r.logprobs[:cut], abs=1e-4)


def test_zero_new_tokens_gives_empty_samples(sampler, prompts):
    assert tokens(sampler.generate(prompts, SamplingParams(max_new_tokens=0))) == [[], [], []]


# -- log-prob agreement ----------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_generate_logprobs_match_token_logprobs_in_padded_batches(engine, prompts, temperature):
    trainable, sampler = engine
    out = sampler.generate(
        prompts, SamplingParams(temperature=temperature, max_new_tokens=15), seeds=[3, 4, 5]
    )
    rows = [p + s.token_ids for p, s in zip(prompts, out)]
    for side in ("left", "right"):
        ids, mask = padded(rows, side)
        with torch.no_grad():
            lp = trainable.token_logprobs(ids, mask, temperature=temperature)
        for i, (p, s) in enumerate(zip(prompts, out)):
            start = ids.shape[1] - len(rows[i]) if side == "left" else 0
            got = lp[i, start + len(p) : start + len(rows[i])]
            assert torch.allclose(got, torch.tensor(s.logprobs), atol=1e-4), side


def test_top_p_behaviour_logprobs_exceed_the_learners_by_the_dropped_mass(engine, prompts):
    """mu(token) = p(token) / kept mass >= p(token): the learner's full-softmax log-prob is never
    above the recorded behaviour log-prob, and is below it somewhere."""
    trainable, sampler = engine
    out = sampler.generate(prompts, SamplingParams(max_new_tokens=12, top_p=0.5), seeds=[1, 2, 3])
    gaps = []
    for p, s in zip(prompts, out):
        full = logprobs_of(trainable, p + s.token_ids)[len(p) :]
        gaps += (torch.tensor(s.logprobs) - full).tolist()
    assert min(gaps) > -1e-4 and max(gaps) > 0.05


def test_token_logprobs_zero_position_zero_padding_and_entropy_bounds(engine, prompts):
    trainable, _ = engine
    ids, mask = padded(prompts, "left")
    with torch.no_grad():
        lp, ent = trainable.token_logprobs(ids, mask, return_entropy=True)
    first_real = mask.argmax(dim=1)
    assert torch.all(lp[torch.arange(3), first_real] == 0) and torch.all(lp[mask == 0] == 0)
    assert torch.all(lp <= 0) and torch.all(ent >= 0)
    assert torch.all(ent <= math.log(len(trainable.tokenizer)) + 1e-4)
    alone = logprobs_of(trainable, prompts[0])  # a row alone equals it inside the padded batch
    assert torch.allclose(lp[0, ids.shape[1] - len(prompts[0]) :], alone, atol=1e-5)


def test_entropy_is_that_of_the_tempered_distribution(engine, prompts):
    trainable, _ = engine
    x = torch.tensor([prompts[0]])
    with torch.no_grad():
        _, ent = trainable.token_logprobs(
            x, torch.ones_like(x), temperature=0.5, return_entropy=True
        )
        z = trainable.model(x).logits[0, :-1].float() / 0.5
    expected = -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)
    assert torch.allclose(ent[0, 1:], expected, atol=1e-4)


def test_chunked_logit_rows_give_the_same_logprobs_entropy_and_gradients(tiny_model_dir, prompts):
    """token_logprobs projects to the vocabulary a few rows at a time (recomputed in backward
    when there is more than one chunk); results must not depend on the chunk size. Full
    fine-tuning: the head weight gets gradients. Entropy is a diagnostic without gradient."""
    ids, mask = padded(prompts, "left")
    outs = []
    for rows in (10_000, 3, 1):  # one chunk (kept); several chunks (recomputed); one row each
        trainable, _ = build(tiny_model_dir, lora=False)
        trainable.logit_chunk_rows = rows
        lp, ent = trainable.token_logprobs(ids, mask, temperature=0.7, return_entropy=True)
        assert not ent.requires_grad
        lp.sum().backward()
        grads = torch.cat([p.grad.flatten() for p in trainable.trainable_parameters()])
        outs.append((lp.detach(), ent.detach(), grads))
    for lp, ent, grads in outs[1:]:
        assert torch.allclose(lp, outs[0][0], atol=1e-5)
        assert torch.allclose(ent, outs[0][1], atol=1e-5)
        assert (grads - outs[0][2]).norm() <= 1e-5 * outs[0][2].norm()  # fp32 sums reorder
    assert outs[0][2].abs().sum() > 0


@pytest.mark.parametrize("rows", [10_000, 2])
def test_score_mask_projects_only_the_scored_positions(tiny_model_dir, prompts, rows):
    """With a loss mask as score_mask, the scored positions get exactly the unmasked values and
    gradients (of a loss over them), every other position 0; the vocabulary projection runs on
    the scored rows only."""
    ids, mask = padded(prompts, "right")
    score = torch.zeros_like(mask)
    score[0, 3:7], score[2, 2:] = 1, mask[2, 2:]  # a middle span; a row's tail; row 1 unscored
    outs = []
    for score_mask in (None, score):
        trainable, _ = build(tiny_model_dir, lora=False)
        trainable.logit_chunk_rows = rows
        projected, head = [], trainable.logits.head
        trainable.logits.head = lambda h, seen=projected, head=head: (
            seen.append(h.shape[0]),
            head(h),
        )[1]
        lp, ent = trainable.token_logprobs(
            ids, mask, temperature=0.7, return_entropy=True, score_mask=score_mask
        )
        rows_projected = sum(projected)  # in the forward (backward may recompute)
        (lp * score).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in trainable.trainable_parameters()])
        outs.append((lp.detach(), ent, grads, rows_projected))
    (lp_all, ent_all, g_all, _), (lp, ent, g, projected) = outs
    on = score.bool()
    assert torch.allclose(lp[on], lp_all[on], atol=1e-5) and torch.all(lp[~on] == 0)
    assert torch.allclose(ent[on], ent_all[on], atol=1e-5) and torch.all(ent[~on] == 0)
    assert (g - g_all).norm() <= 1e-5 * g_all.norm() and g_all.abs().sum() > 0
    assert projected == int(score.sum())  # not B x (T - 1)


def shared_prefix_run(model_dir, ids, mask, min_shared: int):
    """(log-probs, entropy, gradient of a fixed weighting of them, the shapes the base model ran)
    of a trainable with a live adapter that shares prompts of at least `min_shared` tokens."""
    trainable, _ = build(model_dir, seed=3)
    for p in trainable.trainable_parameters():  # LoRA B = 0 at init: make the adapter live
        torch.nn.init.normal_(p, std=0.05)
    trainable.min_shared_prefix = min_shared
    calls = []
    hook = trainable.lm.base_model.register_forward_pre_hook(
        lambda m, a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    lp, ent = trainable.token_logprobs(ids, mask, temperature=0.9, return_entropy=True)
    hook.remove()
    (lp * torch.arange(lp.shape[1])).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in trainable.trainable_parameters()])
    return lp.detach(), ent, grads, calls


def test_a_shared_prompt_runs_once_with_the_same_logprobs_and_gradients(tiny_model_dir, prompts):
    """A GRPO group's rows share the prompt: token_logprobs runs it once and repeats its keys and
    values; log-probs, entropy and gradients equal those of running every row in full."""
    prompt = prompts[0]
    rows = [prompt + prompts[2], prompt + prompts[1], prompt + prompts[2][::-1] + prompts[1]]
    ids, mask = padded(rows, "right")  # different lengths: right padding after the prompt
    lp_full, ent_full, g_full, calls_full = shared_prefix_run(tiny_model_dir, ids, mask, 10**9)
    lp, ent, g, calls = shared_prefix_run(tiny_model_dir, ids, mask, 2)
    assert calls_full == [ids.shape]
    assert calls == [(1, len(prompt)), (3, ids.shape[1] - len(prompt))]
    assert torch.allclose(lp, lp_full, atol=1e-5) and torch.allclose(ent, ent_full, atol=1e-5)
    assert (g - g_full).norm() <= 1e-5 * g_full.norm() and g_full.abs().sum() > 0


# -- publishing weights ----------------------------------------------------------------------------
def test_merged_sampler_follows_published_weights_only(tiny_model_dir, prompts):
    """The merged copy holds W + scale*BA of the last published adapter: it samples as the
    unmerged (peft) model does after a publish, and not before."""
    merged_t, merged_s = build(tiny_model_dir)
    plain_t, plain_s = build(tiny_model_dir, merged_sampling=False)
    assert merged_s.merged is not None and plain_s.merged is None
    base_before = tokens(merged_s.generate(prompts, greedy()))
    for t in (merged_t, plain_t):  # the same non-zero adapter in both
        torch.manual_seed(0)
        for p in t.trainable_parameters():
            torch.nn.init.normal_(p, std=0.05)
    assert tokens(merged_s.generate(prompts, greedy())) == base_before  # not yet published
    for version in (1, 2):
        merged_s.load_weights(merged_t.export_weights(version))
        plain_s.load_weights(plain_t.export_weights(version))
        params = SamplingParams(max_new_tokens=8)
        a = merged_s.generate(prompts, params, seeds=[3, 4, 5])
        b = plain_s.generate(prompts, params, seeds=[3, 4, 5])
        assert tokens(a) == tokens(b) and merged_s.version == version
        for sa, sb in zip(a, b):
            assert torch.allclose(torch.tensor(sa.logprobs), torch.tensor(sb.logprobs), atol=1e-4)
        one_adam_step(merged_t, prompts[0])
        one_adam_step(plain_t, prompts[0])
    assert tokens(merged_s.generate(prompts, greedy())) != base_before
    # adapter off samples the frozen base, exactly as before any training
    assert tokens(merged_s.generate(prompts, greedy(), adapter=False)) == base_before
    assert tokens(plain_s.generate(prompts, greedy(), adapter=False)) == base_before


def small_update(trainable, rms: float, seed: int = 0):
    """The trainable's adapter set so that every adapted linear's delta scale * B A has entries
    of RMS `rms` (A ~ N(0, 1/r), B ~ N(0, (rms / scale)^2)), published as version 1."""
    g = torch.Generator().manual_seed(seed)
    scale = trainable.cfg.lora_alpha / trainable.cfg.lora_r
    with torch.no_grad():
        for name, p in trainable.model.named_parameters():
            if "lora_A" in name:
                p.copy_(torch.randn(p.shape, generator=g) / trainable.cfg.lora_r**0.5)
            elif "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * rms / scale)
    return trainable.export_weights(1)


def merged_deltas(sampler, update):
    """Per adapted linear: (base weight W, the fp32 delta scale * B A, the copy's linear)."""
    scale = update.adapter_config["lora_alpha"] / update.adapter_config["r"]
    return [
        (
            base,
            scale
            * update.tensors[f"{name}.lora_B.weight"].float()
            @ update.tensors[f"{name}.lora_A.weight"].float(),
            target,
        )
        for name, (base, target) in sampler.merged.layers.items()
    ]


def test_a_bf16_merged_sampler_holds_a_tiny_update_exactly(tiny_model_dir):
    # Hand-checkable: for |W| >= 2^-6, W + 1e-5 is W in bf16 (8 significant bits: neighbours
    # 2^-13 or more apart), so bf16(W + delta) would drop the update; the merged copy holds
    # W + delta in fp32.
    trainable, sampler = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="bfloat16"))
    base, _, target = merged_deltas(sampler, trainable.export_weights(0))[0]
    assert base.dtype == torch.bfloat16 and target.weight.dtype == torch.float32
    big = base.float().abs() >= 2**-6
    assert big.float().mean() > 0.5
    assert torch.equal((base.float()[big] + 1e-5).bfloat16(), base[big])
    update = small_update(trainable, 1e-5)
    sampler.load_weights(update)
    err = norm = 0.0
    for base, delta, target in merged_deltas(sampler, update):
        err += (target.weight - (base.float() + delta)).norm() ** 2
        norm += delta.norm() ** 2
    assert (err / norm) ** 0.5 < 1e-3  # the fp32 merge's own rounding: ~1e-4


@pytest.mark.parametrize("rms", [1e-5, 1e-4])
def test_a_tiny_update_reaches_a_bf16_merged_samplers_layer_outputs(tiny_model_dir, rms):
    # Each adapted linear's bf16 output moves by x (scale B A)^T on average (share ~1); with
    # bf16(W + delta) weights a delta of RMS 1e-5 mostly vanishes (share ~0.2 here).
    trainable, sampler = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="bfloat16"))
    g = torch.Generator().manual_seed(1)
    layers = merged_deltas(sampler, trainable.export_weights(0))
    inputs = {
        id(t): torch.randn(512, t.weight.shape[1], generator=g).bfloat16() for _, _, t in layers
    }
    with torch.no_grad():
        before = {id(t): t(inputs[id(t)]).float() for _, _, t in layers}
    update = small_update(trainable, rms)
    sampler.load_weights(update)
    dot = norm = 0.0
    with torch.no_grad():
        for _, delta, target in merged_deltas(sampler, update):
            x = inputs[id(target)]
            moved, expected = target(x).float() - before[id(target)], x.float() @ delta.T
            dot += (moved * expected).sum().item()
            norm += expected.pow(2).sum().item()
    assert dot / norm == pytest.approx(1.0, abs=0.1)


def test_a_trainable_on_another_device_gives_the_cpus_logprobs_and_gradients(
    tiny_model_dir, prompts
):
    # the model on the fake accelerator (tests/fake_device.py: CPU tensors meeting it raise, as
    # on CUDA), inputs on the CPU as callers pass them; KL reference through the frozen base
    ids, mask = padded(prompts, "left")
    path, cfg = tiny_model_dir, PolicyConfig(model=str(tiny_model_dir), dtype="float32")

    def run(device):
        lm = load_lm(path, torch.float32, torch.device("cpu")).to(device)
        t = HFTrainable(cfg, lm, load_tokenizer(path), FrozenReference(path, torch.float32, device))
        with torch.no_grad():
            for name, p in t.model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.01)
        logp, ent = t.token_logprobs(ids, mask, return_entropy=True, score_mask=mask)
        logp.sum().backward()
        with torch.no_grad(), t.frozen_base():
            ref = t.token_logprobs(ids, mask)
        return [
            x.detach().cpu() for x in (logp, ent, ref, *(p.grad for p in t.trainable_parameters()))
        ]

    expected = run(torch.device("cpu"))
    with on_fake_device():
        got = run(DEVICE)
    assert len(got) == len(expected) > 3
    for a, b in zip(got, expected):  # float rounding of reordered kernels: 1e-6 on some CPUs
        assert torch.allclose(a, b, atol=1e-5)


def test_lm_head_is_not_a_lora_target():
    from practicum.config import load_config

    with pytest.raises(
        ConfigError, match="^config error at model.lora_target_modules: lm_head is not supported"
    ):
        load_config(None, ["model.lora_target_modules=[q_proj, lm_head]"])
    assert load_config(None, ["model.lora=false", "model.lora_target_modules=[lm_head]"])


# -- training --------------------------------------------------------------------------------------
def test_lora_trains_only_the_adapter(engine):
    trainable, _ = engine
    names = [n for n, p in trainable.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    # r * (in + out) per adapted layer:
    # q 64->64, k,v 64->32, o 64->64, gate,up 64->128, down 128->64
    per_layer = 16 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64))
    assert sum(p.numel() for p in trainable.trainable_parameters()) == 2 * per_layer


def test_frozen_base_gives_original_logprobs_after_training(tiny_model_dir, prompts):
    trainable, sampler = build(tiny_model_dir)
    ids = prompts[0]
    before = logprobs_of(trainable, ids)
    one_adam_step(trainable, ids)
    after = logprobs_of(trainable, ids)
    assert (after - before).abs().max() > 1e-2  # the adapter moved the policy
    with trainable.frozen_base():
        assert torch.allclose(logprobs_of(trainable, ids), before, atol=1e-6)
    sample = sampler.generate([ids], SamplingParams(max_new_tokens=5), seeds=[0], adapter=False)[0]
    with trainable.frozen_base():
        base_lp = logprobs_of(trainable, ids + sample.token_ids)[len(ids) :]
    assert torch.allclose(base_lp, torch.tensor(sample.logprobs), atol=1e-4)
    assert torch.allclose(logprobs_of(trainable, ids), after)  # adapter back on after the block


def test_save_and_load_restore_outputs(tiny_model_dir, prompts, tmp_path):
    trainable, _ = build(tiny_model_dir)
    one_adam_step(trainable, prompts[0])
    trainable.save(tmp_path / "ckpt")
    trainable.save(tmp_path / "ckpt")  # overwriting an existing save works
    trained = logprobs_of(trainable, prompts[0])
    fresh, _ = build(tiny_model_dir)
    assert not torch.allclose(logprobs_of(fresh, prompts[0]), trained, atol=1e-3)
    fresh.load_weights(tmp_path / "ckpt")
    assert torch.allclose(logprobs_of(fresh, prompts[0]), trained, atol=1e-6)
    assert (tmp_path / "ckpt" / "adapter_config.json").is_file()
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()
    # model.init: a new engine starts from the saved adapter, and its sampler too
    init_t, init_s = build(tiny_model_dir, init=str(tmp_path / "ckpt"))
    assert torch.allclose(logprobs_of(init_t, prompts[0]), trained, atol=1e-6)
    _, trained_s = build(tiny_model_dir, merged_sampling=False, init=str(tmp_path / "ckpt"))
    assert tokens(init_s.generate(prompts, greedy())) == tokens(
        trained_s.generate(prompts, greedy())
    )


def test_full_finetuning_trains_everything_and_keeps_a_frozen_reference(
    tiny_model_dir, prompts, tmp_path
):
    trainable, sampler = build(tiny_model_dir, lora=False)
    base_tokens = tokens(sampler.generate(prompts, greedy()))
    before = logprobs_of(trainable, prompts[0])
    assert len(trainable.trainable_parameters()) == len(list(trainable.model.parameters()))
    embed = trainable.model.get_input_embeddings().weight.detach().clone()
    one_adam_step(trainable, prompts[0])
    assert not torch.equal(trainable.model.get_input_embeddings().weight, embed)
    with trainable.frozen_base():  # the KL reference: an untrained copy, loaded on demand
        assert torch.allclose(logprobs_of(trainable, prompts[0]), before, atol=1e-6)
    assert tokens(sampler.generate(prompts, greedy(), adapter=False)) == base_tokens
    trainable.save(tmp_path / "full")
    fresh, _ = build(tiny_model_dir, lora=False)
    fresh.load_weights(tmp_path / "full")
    assert torch.allclose(
        logprobs_of(fresh, prompts[0]), logprobs_of(trainable, prompts[0]), atol=1e-6
    )
    with pytest.raises(PracticumError, match="lora=False"):
        build(tiny_model_dir)[0].load_weights(tmp_path / "full")


def test_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir, prompts):
    grads = []
    for ckpt in (False, True):
        trainable, sampler = build(tiny_model_dir, gradient_checkpointing=ckpt)
        layers = trainable.model.get_base_model().model.layers
        assert all(layer.gradient_checkpointing == ckpt for layer in layers)
        torch.manual_seed(0)
        for p in trainable.trainable_parameters():  # lora_B non-zero: every adapter gets grads
            torch.nn.init.normal_(p, std=0.02)
        x = torch.tensor([prompts[0]])
        trainable.token_logprobs(x, torch.ones_like(x)).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in trainable.trainable_parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert len(sampler.generate(prompts[:1], greedy(3))[0].token_ids) == 3


def test_bf16_generate_and_token_logprobs_roughly_agree(tiny_model_dir, prompts):
    trainable, sampler = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="bfloat16"))
    out = sampler.generate(prompts, SamplingParams(max_new_tokens=10), seeds=[0, 1, 2])
    for p, s in zip(prompts, out):
        got = logprobs_of(trainable, p + s.token_ids)[len(p) :]
        assert torch.allclose(got, torch.tensor(s.logprobs), atol=0.1)


def test_frozen_sampler_samples_like_the_untrained_engine(tiny_model_dir, engine, prompts):
    frozen = load_frozen_sampler(str(tiny_model_dir), dtype="float32")
    _, fresh = build(tiny_model_dir)
    assert tokens(frozen.generate(prompts, greedy())) == tokens(fresh.generate(prompts, greedy()))


# -- the real model --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_answers_a_chat_prompt(smollm2_dir):
    trainable, sampler = load_hf_engine(PolicyConfig(model=str(smollm2_dir), dtype="float32"))
    tok = trainable.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    out = sampler.generate([prompt], greedy(24))[0]
    words = out.text.split()
    assert len(words) >= 2 and sum(w.isascii() for w in words) == len(words)
    assert "Paris" in out.text
    x = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        lp = trainable.token_logprobs(x, torch.ones_like(x))[0, len(prompt) :]
    # greedy records a point mass; the learner's log-probs of the argmax tokens are high
    assert out.logprobs == [0.0] * len(out.token_ids) and lp.mean() > -1.0


def test_prompt_runs_split_a_micro_batch_by_group_only_when_it_saves_work():
    from practicum.engine.hf_trainable import prompt_runs

    system = [1, 2, 3]
    group_a, group_b = system + [10] * 12, system + [20] * 12  # prompts of two groups
    rows = [group_a + [5, 6], group_a + [7, 8], group_b + [5, 6], group_b + [9, 9]]
    ids, mask = torch.tensor(rows), torch.ones(4, 17, dtype=torch.long)
    # shared: the 3-token system prompt across groups, 15 tokens within each
    assert prompt_runs(ids, mask, min_shared=2) == [(0, 2), (2, 4)]
    # an improvement prompt within a group (shares 15 of 17 with its neighbour) stays in
    rows[1] = group_a + [4, 4]
    assert prompt_runs(torch.tensor(rows), mask, min_shared=2) == [(0, 2), (2, 4)]
    # nothing shared (e.g. left padding): one batch, not one row at a time
    left = torch.tensor([[0, 0, 7, 8], [0, 5, 6, 7], [1, 2, 3, 4]])
    left_mask = (torch.arange(4) >= torch.tensor([[2], [1], [0]])).long()
    assert prompt_runs(left, left_mask, min_shared=2) == [(0, 3)]
    assert prompt_runs(ids[:1], mask[:1], min_shared=2) == [(0, 1)]


def test_two_groups_in_one_micro_batch_give_the_logprobs_and_gradients_of_running_them_apart(
    tiny_model_dir, prompts
):
    """Rows of two groups: each group's prompt runs once, with the same log-probs and gradients
    as running every row in full."""
    rows = [
        prompts[0] + prompts[2],
        prompts[0] + prompts[1],
        prompts[2] + prompts[0],
        prompts[2] + prompts[1],
    ]
    ids, mask = padded(rows, "right")
    lp_full, _, g_full, calls_full = shared_prefix_run(tiny_model_dir, ids, mask, 10**9)
    lp, _, g, calls = shared_prefix_run(tiny_model_dir, ids, mask, 2)
    assert calls_full == [tuple(ids.shape)]
    assert [c[0] for c in calls] == [1, 2, 1, 2]  # per group: its prompt once, then its rows
    assert torch.allclose(lp, lp_full, atol=1e-5)
    assert (g - g_full).norm() <= 1e-5 * g_full.norm() and g_full.abs().sum() > 0


def test_the_adapter_starts_from_the_seed_and_each_name_alone(tiny_model_dir):
    """A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and B = 0, a function of (seed, name) only: the
    same seed gives the same adapter, another seed another, and `lora_init` alone (what a rank
    of the sharded learner computes) gives the model's value."""
    from practicum.engine.factory import load_trainable
    from practicum.engine.hf_trainable import lora_init

    def adapter(seed):
        t = load_trainable(PolicyConfig(model=str(tiny_model_dir), dtype="float32", seed=seed))
        return {n: p.detach().clone() for n, p in t.lm.named_parameters() if "lora_" in n}

    a, again, other = adapter(0), adapter(0), adapter(1)
    assert a.keys() == again.keys() == other.keys() and len(a) == 2 * 7 * 2  # 2 layers
    for name, value in a.items():
        assert torch.equal(value, again[name]) and torch.equal(
            value, lora_init(name, tuple(value.shape), 0)
        )
        if ".lora_B." in name:
            assert not value.any()
        else:
            bound = 1 / math.sqrt(value.shape[1])
            assert value.abs().max() <= bound and value.std() > 0.4 * bound
            assert not torch.equal(value, other[name])
