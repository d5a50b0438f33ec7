"""Token sampling math: the nucleus, the exponential race, and behaviour log-probs that are
those of the distribution actually sampled from."""

import math

import pytest
import torch

from practicum.engine.sampling import sample_next, top_p_filter


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
    tok, lp = sample_next(logits, 1.0, 1.0, [g] * 20000)  # one generator: independent draws
    freq = torch.bincount(tok, minlength=3) / 20000
    assert torch.allclose(freq, probs, atol=0.015)
    assert torch.allclose(lp, probs.log()[tok], atol=1e-6)


def test_top_p_logprobs_are_renormalised_over_the_nucleus():
    # p = (0.1, 0.2, 0.7); top_p 0.85 keeps {0.7, 0.2}: mu = (0, 2/9, 7/9)
    probs = torch.tensor([0.1, 0.2, 0.7])
    logits = probs.log().expand(5000, 3).contiguous()
    g = torch.Generator().manual_seed(1)
    tok, lp = sample_next(logits, 1.0, 0.85, [g] * 5000)
    assert (tok != 0).all()
    freq = torch.bincount(tok, minlength=3) / 5000
    assert freq[2].item() == pytest.approx(7 / 9, abs=0.02)
    assert torch.allclose(lp[tok == 1], torch.tensor(math.log(2 / 9)), atol=1e-5)
    assert torch.allclose(lp[tok == 2], torch.tensor(math.log(7 / 9)), atol=1e-5)


def test_temperature_scales_the_sampled_distribution_and_its_logprobs():
    logits = torch.tensor([[2.0, 0.0]])
    _, lp = sample_next(logits, 2.0, 1.0, [torch.Generator().manual_seed(0)])
    # softmax([1, 0]) = (e/(e+1), 1/(e+1))
    expected = {0: 1 - math.log(math.e + 1), 1: -math.log(math.e + 1)}
    tok, _ = sample_next(logits, 2.0, 1.0, [torch.Generator().manual_seed(0)])
    assert lp.item() == pytest.approx(expected[tok.item()], abs=1e-6)


def test_greedy_is_a_point_mass_with_log_prob_zero():
    tok, lp = sample_next(torch.tensor([[2.0, 1.0, 0.0], [0.0, 5.0, 1.0]]), 0.0, 0.5, None)
    assert tok.tolist() == [0, 1] and lp.tolist() == [0.0, 0.0]
