"""engine/constraint.py and the engine halves under a grammar: the masked log-softmax by hand,
the packed masks, replay, malformed grammars; the HF sampler's constrained samples match the
grammar and their log-probs are the learner's when it replays the grammar (tiny model, SmolLM2)."""

import math
import re

import pytest
import torch

from practicum.engine.base import SamplingParams
from practicum.engine.constraint import (
    GrammarError,
    GrammarMasks,
    compiled,
    grammars_for,
    masked_logits,
    unpack,
)
from practicum.engine.hf import PolicyConfig, load_hf_engine
from practicum.engine.hf_trainable import _logp_entropy

ANSWER = 'start: "Answer: " /[0-9]{1,3}/ "."'
ANSWER_RE = re.compile(r"Answer: [0-9]{1,3}\.")
TOOL = 'start: "call " NAME "(" ARG ")"\nNAME: "view" | "search" | "edit"\nARG: /[a-z_]{1,12}/'
TOOL_RE = re.compile(r"call (view|search|edit)\([a-z_]{1,12}\)")


def packed_of(allowed: list[list[int]], words: int = 1) -> torch.Tensor:
    """Packed int32 masks [len(allowed), words] allowing the listed token ids."""
    out = torch.zeros(len(allowed), words, dtype=torch.int64)
    for i, ids in enumerate(allowed):
        for t in ids:
            out[i, t // 32] |= 1 << (t % 32)
    return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)


# -- the math -------------------------------------------------------------------------------------
def test_unpack_reads_bit_k_of_word_w_as_token_32w_plus_k():
    packed = packed_of([[0, 5, 31, 32, 63]], words=2)
    bits = unpack(packed, 64)[0]
    assert bits.nonzero().flatten().tolist() == [0, 5, 31, 32, 63]
    assert unpack(packed, 40)[0].nonzero().flatten().tolist() == [0, 5, 31, 32]


def test_tokens_past_the_packed_width_are_allowed_only_where_nothing_is_masked():
    packed = torch.tensor([[-1], [1]], dtype=torch.int32)  # unconstrained; only token 0
    bits = unpack(packed, 40)
    assert bits[0].all() and bits[1].nonzero().flatten().tolist() == [0]


def test_masked_log_softmax_by_hand():
    # z = (1, 2, 3, 0), tokens 0 and 2 allowed:
    #   log q(2) = 3 - log(e^1 + e^3) = -log(1 + e^-2) = -0.126928
    #   log q(0) = 1 - log(e^1 + e^3) = -2.126928
    #   H(q) = -(q0 log q0 + q2 log q2) with q0 = 1 / (1 + e^2) = 0.119203:
    #   0.119203 * 2.126928 + 0.880797 * 0.126928 = 0.253537 + 0.111798 = 0.365334
    z = torch.tensor([[1.0, 2.0, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0]])
    masked = masked_logits(z, packed_of([[0, 2], [0, 2]]))
    logp, ent = _logp_entropy(masked, torch.tensor([2, 0]), True)
    assert torch.allclose(logp, torch.tensor([-0.126928, -2.126928]), atol=1e-6)
    q0 = 1 / (1 + math.e**2)
    h = -(q0 * math.log(q0) + (1 - q0) * math.log(1 - q0))
    assert abs(h - 0.365334) < 1e-5 and torch.allclose(ent, torch.tensor([h, h]), atol=1e-6)


def test_a_forced_token_has_logprob_zero_and_no_gradient():
    z = torch.tensor([[0.3, -1.0, 2.0, 0.5]], requires_grad=True)
    logp, ent = _logp_entropy(masked_logits(z, packed_of([[1]])), torch.tensor([1]), True)
    logp.sum().backward()
    assert logp.item() == 0.0 and ent.item() == 0.0
    assert torch.equal(z.grad, torch.zeros_like(z))


def test_a_malformed_grammar_is_a_one_line_error_naming_it():
    with pytest.raises(GrammarError) as err:
        compiled('start: "a" undefined_rule')
    msg = str(err.value)
    assert "\n" not in msg and "undefined_rule" in msg and 'start: "a"' in msg
    with pytest.raises(GrammarError, match="expected a Lark grammar"):
        compiled("   ")


def test_grammar_masks_keep_only_constrained_positions_each_distinct_mask_once():
    # a [2, 6] batch: row 0 constrained at 1..3 (masks A, B, A), row 1 at 4 (mask B)
    a, b = packed_of([[0, 5]], words=2)[0], packed_of([[33]], words=2)[0]
    dense = torch.full((2, 6, 2), -1, dtype=torch.int32)
    dense[0, 1], dense[0, 2], dense[0, 3], dense[1, 4] = a, b, a, b
    masks = GrammarMasks.from_spans(
        (2, 6),
        [(0, 1, torch.stack([a, b]), torch.tensor([0, 1, 0])), (1, 4, b[None], torch.tensor([0]))],
        width=2,
    )
    assert masks.positions.tolist() == [1, 2, 3, 10] and len(masks.table) == 2
    assert torch.equal(masks.dense(), dense)
    assert torch.equal(masks.at(torch.tensor([10, 0, 3])), dense.view(12, 2)[[10, 0, 3]])
    assert torch.equal(GrammarMasks.from_dense(dense).dense(), dense)
    assert masks.nbytes == 4 * 8 + 4 * 8 + 2 * 2 * 4  # positions, which, table: not B x T x W


# -- replay ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))


@pytest.fixture(scope="module")
def prompts(engine):
    tok = engine[0].tokenizer
    return [tok(t).input_ids for t in ["What is 2+2?", "Hi", "Call a tool, please."]]


def test_replay_keeps_each_distinct_mask_once(engine):
    tok = engine[0].tokenizer
    ids = tok("Answer: 123.").input_ids + [tok.eos_token_id]
    table, which = grammars_for(tok).replay_distinct(ANSWER, tuple(ids))
    assert len(table) < len(ids) and len(which) == len(ids)  # the digits share one mask
    assert len({tuple(r.tolist()) for r in table}) == len(table)


def test_replay_allows_exactly_the_grammars_continuations(engine):
    tok = engine[0].tokenizer
    ids = tok("Answer: 42.", add_special_tokens=False).input_ids + [tok.eos_token_id]
    masks = unpack(grammars_for(tok).replay(ANSWER, tuple(ids)), len(tok))
    digits = [tok(str(d), add_special_tokens=False).input_ids[0] for d in range(10)]
    first_digit = ids.index(digits[4])
    for i, t in enumerate(ids):
        assert masks[i, t], i  # every replayed token was allowed where it stands
    assert not masks[0, digits].any()  # the grammar opens with "Answer", not a digit
    assert masks[first_digit, digits].all()  # the number is free
    assert masks[-1].nonzero().flatten().tolist() == [tok.eos_token_id]  # complete: eos only


def test_replay_refuses_ids_the_grammar_does_not_allow(engine):
    tok = engine[0].tokenizer
    ids = tuple(tok("Question: 42.", add_special_tokens=False).input_ids)
    with pytest.raises(GrammarError, match="not allowed by grammar"):
        grammars_for(tok).replay(ANSWER, ids)


# -- sampling under a grammar ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "grammar,pattern", [(ANSWER, ANSWER_RE), (TOOL, TOOL_RE)], ids=["answer", "tool"]
)
def test_constrained_samples_match_the_grammar_and_end_with_eos(engine, prompts, grammar, pattern):
    _, sampler = engine
    tok = engine[0].tokenizer
    params = SamplingParams(temperature=1.0, max_new_tokens=40, grammar=grammar)
    for seed in range(4):
        for s in sampler.generate(prompts, params, seeds=[seed, seed + 10, seed + 20]):
            assert pattern.fullmatch(s.text), s.text
            assert s.finish_reason == "stop" and s.token_ids[-1] == tok.eos_token_id
            assert s.logprobs[-1] == 0.0  # complete: eos was the only token allowed


def test_without_a_grammar_the_tiny_model_does_not_match_it(engine, prompts):
    """The check above is not vacuous: free samples of the random model are gibberish."""
    out = engine[1].generate(
        prompts, SamplingParams(temperature=1.0, max_new_tokens=40), seeds=[0, 1, 2]
    )
    assert not any(ANSWER_RE.fullmatch(s.text) for s in out)


def scored(trainable, prompts, samples, grammar, temperature):
    """The learner's log-probs of each sample's ids (padded batch), with and without the
    replayed grammar masks."""
    g = grammars_for(trainable.tokenizer)
    rows = [p + s.token_ids for p, s in zip(prompts, samples)]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    spans = []
    for i, (p, s) in enumerate(zip(prompts, samples)):
        ids[i, : len(rows[i])], mask[i, : len(rows[i])] = torch.tensor(rows[i]), 1
        spans.append((i, len(p), *g.replay_distinct(grammar, tuple(s.token_ids))))
    allowed = GrammarMasks.from_spans(tuple(ids.shape), spans, g.width)
    with torch.no_grad():
        masked = trainable.token_logprobs(ids, mask, temperature, allowed=allowed)
        free = trainable.token_logprobs(ids, mask, temperature)
    cut = [(len(p), len(r)) for p, r in zip(prompts, rows)]
    return (
        [masked[i, a:b] for i, (a, b) in enumerate(cut)],
        [free[i, a:b] for i, (a, b) in enumerate(cut)],
    )


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_sampler_and_learner_logprobs_agree_under_a_grammar(engine, prompts, temperature):
    trainable, sampler = engine
    out = sampler.generate(
        prompts,
        SamplingParams(temperature=temperature, max_new_tokens=40, grammar=TOOL),
        seeds=[3, 4, 5],
    )
    masked, free = scored(trainable, prompts, out, TOOL, temperature)
    gap = max((m - torch.tensor(s.logprobs)).abs().max().item() for m, s in zip(masked, out))
    unmasked = max((f - torch.tensor(s.logprobs)).abs().max().item() for f, s in zip(free, out))
    assert gap < 1e-4
    assert unmasked > 1.0  # scoring the unmasked pi instead would be far off


def test_greedy_under_a_grammar_takes_the_masked_argmax_with_point_masses(engine, prompts):
    trainable, sampler = engine
    out = sampler.generate(
        prompts, SamplingParams(temperature=0.0, max_new_tokens=40, grammar=TOOL)
    )
    g = grammars_for(trainable.tokenizer)
    for p, s in zip(prompts, out):
        assert TOOL_RE.fullmatch(s.text) and s.logprobs == [0.0] * len(s.token_ids)
        with torch.no_grad():
            logits = trainable.lm(torch.tensor([p + s.token_ids])).logits[0, len(p) - 1 : -1]
        best = masked_logits(logits, g.replay(TOOL, tuple(s.token_ids))).argmax(-1)
        assert best.tolist() == s.token_ids


def test_a_bad_grammar_fails_the_generate_call_in_one_line(engine, prompts):
    with pytest.raises(GrammarError, match="grammar error"):
        engine[1].generate(prompts, SamplingParams(max_new_tokens=4, grammar="start: nope"))


@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_logprobs_agree_under_a_grammar(smollm2_dir):
    trainable, sampler = load_hf_engine(PolicyConfig(model=str(smollm2_dir), dtype="float32"))
    tok = trainable.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Which tool would you call to read setup.py?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    prompts = [prompt, prompt]
    out = sampler.generate(
        prompts, SamplingParams(temperature=1.0, max_new_tokens=24, grammar=TOOL), seeds=[0, 1]
    )
    masked, free = scored(trainable, prompts, out, TOOL, 1.0)
    for s, m in zip(out, masked):
        assert TOOL_RE.fullmatch(s.text), s.text
        assert (m - torch.tensor(s.logprobs)).abs().max() < 1e-4
