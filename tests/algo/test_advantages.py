import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from practicum.algo.advantages import flow_grpo_advantages, group_advantages, rloo_advantages


def test_group_advantages_use_unbiased_std():
    # mean 0.5, unbiased std sqrt(1/3) = 0.5774 -> A = +-0.5 / 0.5774 = +-0.8660
    a = group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 0, 0]))
    assert torch.allclose(a, torch.tensor([0.8660, -0.8660, 0.8660, -0.8660]), atol=1e-4)


def test_group_advantages_normalise_each_group_separately():
    rewards = torch.tensor([1.0, 0.0, 3.0, 5.0, 4.0])
    groups = torch.tensor([7, 7, -2, -2, -2])  # arbitrary, non-contiguous ids
    # group 7: mean .5, std .7071 -> +-.7071; group -2: mean 4, std 1 -> -1, 1, 0
    a = group_advantages(rewards, groups)
    assert torch.allclose(a, torch.tensor([0.7071, -0.7071, -1.0, 1.0, 0.0]), atol=1e-4)


def test_group_advantages_without_std_scaling_only_centre():
    a = group_advantages(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0, 0, 0]), scale_by_std=False)
    assert torch.allclose(a, torch.tensor([1.0, -1.0, 0.0]))


def test_singleton_group_gets_zero_advantage():
    a = group_advantages(torch.tensor([5.0, 1.0, 0.0]), torch.tensor([0, 1, 1]))
    assert a[0].item() == 0.0
    assert torch.isfinite(a).all()


def test_all_equal_group_gets_zero_advantage():
    a = group_advantages(torch.tensor([2.0, 2.0, 2.0]), torch.tensor([0, 0, 0]))
    assert torch.equal(a, torch.zeros(3))


def test_group_advantages_accept_integer_rewards():
    a = group_advantages(torch.tensor([1, 0]), torch.tensor([0, 0]), scale_by_std=False)
    assert torch.allclose(a, torch.tensor([0.5, -0.5]))


def test_group_advantages_reject_mismatched_shapes():
    with pytest.raises(ValueError, match="same length"):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 0]))


def test_rloo_subtracts_mean_of_the_others():
    # 1 - mean(0, 2) = 0;  0 - mean(1, 2) = -1.5;  2 - mean(1, 0) = 1.5
    a = rloo_advantages(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0, 0, 0]))
    assert torch.allclose(a, torch.tensor([0.0, -1.5, 1.5]))


def test_rloo_singleton_group_gets_zero():
    a = rloo_advantages(torch.tensor([4.0, 1.0, 0.0]), torch.tensor([3, 5, 5]))
    assert torch.allclose(a, torch.tensor([0.0, 1.0, -1.0]))


def test_flow_grpo_broadcasts_reward_and_weighs_turn_rich_trajectories_more():
    # Episode 0: reward 1 over 3 turns; episode 1: reward 0 over 1 turn; same task.
    # Turn samples [1, 1, 1, 0]: mean .75, unbiased std .5 -> A = [.5, .5, .5, -1.5]
    # (episode-level GRPO would give +-0.7071 instead).
    a = flow_grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([3, 1]), torch.tensor([0, 0]))
    assert torch.allclose(a, torch.tensor([0.5, 0.5, 0.5, -1.5]), atol=1e-5)


def test_flow_grpo_keeps_episode_then_turn_order_across_groups():
    a = flow_grpo_advantages(
        torch.tensor([1.0, 5.0, 0.0, 3.0]),
        torch.tensor([1, 2, 1, 0]),  # the last episode has no planner turn
        torch.tensor([0, 1, 0, 1]),
        scale_by_std=False,
    )
    # task 0 turns: [1, 0] -> +-.5; task 1 turns: [5, 5] -> 0, 0
    assert torch.allclose(a, torch.tensor([0.5, 0.0, 0.0, -0.5]))


def test_flow_grpo_rejects_negative_turn_counts():
    with pytest.raises(ValueError, match="turns_per_episode"):
        flow_grpo_advantages(torch.tensor([1.0]), torch.tensor([-1]), torch.tensor([0]))


group_rewards = st.lists(
    st.tuples(st.integers(0, 3), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=20
)


@settings(max_examples=50, deadline=None)
@given(group_rewards, st.booleans())
def test_group_advantages_have_zero_mean_per_group(pairs, scale):
    groups = torch.tensor([g for g, _ in pairs])
    rewards = torch.tensor([r for _, r in pairs], dtype=torch.float64)
    a = group_advantages(rewards, groups, scale_by_std=scale)
    for g in groups.unique():
        assert abs(a[groups == g].mean().item()) < 1e-6


@settings(max_examples=50, deadline=None)
@given(group_rewards)
def test_rloo_is_rescaled_centred_reward(pairs):
    # A_rloo = n / (n - 1) * (R - mean) for groups of size n > 1
    groups = torch.tensor([g for g, _ in pairs])
    rewards = torch.tensor([r for _, r in pairs], dtype=torch.float64)
    rloo = rloo_advantages(rewards, groups)
    centred = group_advantages(rewards, groups, scale_by_std=False)
    for g in groups.unique():
        n = int((groups == g).sum())
        scale = n / (n - 1) if n > 1 else 0.0
        assert torch.allclose(rloo[groups == g], scale * centred[groups == g], atol=1e-9)
