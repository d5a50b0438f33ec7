import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from practicum.algo.weights import broadcast_turn_weights, duration_weights


def test_duration_weights_restore_slow_actions():
    w = duration_weights(torch.tensor([1.0, 3.0]))
    assert torch.allclose(w, torch.tensor([0.5, 1.5]))


def test_duration_weights_floor_short_actions():
    # 0.0 s is clamped to 0.05 s: dt = [0.05, 0.15], mean 0.1 -> [0.5, 1.5]
    w = duration_weights(torch.tensor([0.0, 0.15]))
    assert torch.allclose(w, torch.tensor([0.5, 1.5]))


def test_duration_weights_cap_very_slow_actions():
    # mean of [1, 1, 1, 97] is 25 -> [0.04, 0.04, 0.04, 3.88], capped at 2
    w = duration_weights(torch.tensor([1.0, 1.0, 1.0, 97.0]), cap=2.0)
    assert torch.allclose(w, torch.tensor([0.04, 0.04, 0.04, 2.0]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.05, 100.0), min_size=1, max_size=30))
def test_duration_weights_have_mean_one_when_nothing_is_capped(durations):
    w = duration_weights(torch.tensor(durations, dtype=torch.float64), cap=float("inf"))
    assert w.mean().item() == pytest.approx(1.0)


def test_broadcast_turn_weights_maps_turns_to_tokens():
    turn_index = torch.tensor([[-1, 0, 0, -1, 1], [-1, -1, 2, 2, -1]])
    w = broadcast_turn_weights(torch.tensor([0.5, 2.0, 3.0]), turn_index)
    assert torch.allclose(w, torch.tensor([[0.0, 0.5, 0.5, 0.0, 2.0], [0.0, 0.0, 3.0, 3.0, 0.0]]))


def test_broadcast_turn_weights_rejects_out_of_range_turns():
    with pytest.raises(IndexError, match=r"\[-1, 2\)"):
        broadcast_turn_weights(torch.tensor([1.0, 1.0]), torch.tensor([[0, 2]]))
