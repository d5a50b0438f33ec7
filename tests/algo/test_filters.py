import pytest
import torch

from practicum.algo.filters import informative_groups, staleness_mask


def test_all_equal_groups_are_dropped():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    keep = informative_groups(rewards, groups)
    assert keep.tolist() == [False, False, True, True, False, False]


def test_differences_within_tolerance_count_as_equal():
    rewards = torch.tensor([0.5, 0.5 + 1e-10, 0.3, 0.4])
    keep = informative_groups(rewards, torch.tensor([4, 4, 9, 9]))
    assert keep.tolist() == [False, False, True, True]


def test_singleton_group_is_uninformative():
    assert informative_groups(torch.tensor([1.0]), torch.tensor([0])).tolist() == [False]


def test_staleness_mask_keeps_versions_within_the_bound():
    versions = torch.tensor([10, 9, 8, 7])
    keep = staleness_mask(versions, current_version=10, max_staleness=2)
    assert keep.tolist() == [True, True, True, False]


def test_zero_staleness_keeps_only_on_policy_samples():
    keep = staleness_mask(torch.tensor([3, 2]), current_version=3, max_staleness=0)
    assert keep.tolist() == [True, False]


def test_negative_staleness_is_rejected():
    with pytest.raises(ValueError, match="max_staleness"):
        staleness_mask(torch.tensor([1]), current_version=1, max_staleness=-1)
