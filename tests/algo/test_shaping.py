import pytest
import torch

from practicum.algo.shaping import overlong_penalty, step_penalty


def test_overlong_penalty_piecewise():
    # max_len 100, cache 20: free up to 80, linear to -1 at 100, -1 beyond
    lengths = torch.tensor([50, 80, 81, 90, 100, 101, 500])
    expected = torch.tensor([0.0, 0.0, -0.05, -0.5, -1.0, -1.0, -1.0])
    assert torch.allclose(overlong_penalty(lengths, max_len=100, cache_len=20), expected)


def test_overlong_penalty_rejects_empty_cache():
    with pytest.raises(ValueError, match="cache_len=0"):
        overlong_penalty(torch.tensor([1]), max_len=100, cache_len=0)


def test_step_penalty_is_linear_past_the_budget():
    p = step_penalty(torch.tensor([3, 10, 12, 15]), budget=10, per_step=0.1)
    assert torch.allclose(p, torch.tensor([0.0, 0.0, -0.2, -0.5]))
