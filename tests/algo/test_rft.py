import pytest
import torch

from practicum.algo.rft import rft_keep, rft_loss, rft_mask


def test_rft_keeps_clean_successes_only():
    assert rft_keep(solved=True, failed=False, overlong=False)
    assert not rft_keep(solved=False, failed=False, overlong=False)
    assert not rft_keep(solved=True, failed=True, overlong=False)
    assert not rft_keep(solved=True, failed=False, overlong=True)


def test_mask_equals_the_loss_mask_without_malformed_turns():
    # row: prompt [1, 2] | turn 0 [10, 11] | obs [20] | turn 1 [12] | obs [21, 22] | turn 2 [13, 14]
    loss_mask = [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]
    turn_index = [-1, -1, 0, 0, -1, 1, -1, -1, 2, 2]
    assert rft_mask(loss_mask, turn_index, set()) == loss_mask


def test_mask_zeroes_malformed_turns_only():
    loss_mask = [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]
    turn_index = [-1, -1, 0, 0, -1, 1, -1, -1, 2, 2]
    assert rft_mask(loss_mask, turn_index, {1}) == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    assert rft_mask(loss_mask, turn_index, {0, 2}) == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]


def test_mask_rejects_misaligned_rows():
    with pytest.raises(ValueError, match="3 positions"):
        rft_mask([1, 1, 1], [0, 0], set())


def test_rft_loss_is_masked_token_mean_nll():
    # -(ln .5 + ln .25) / 2 = (0.6931 + 1.3863) / 2 = 1.0397; the masked token is ignored
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.01]]))
    loss = rft_loss(logp, torch.tensor([[1, 1, 0]]))
    assert loss.item() == pytest.approx(1.0397, abs=1e-4)
