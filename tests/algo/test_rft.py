import pytest
import torch

from practicum.algo.rft import rft_loss, rft_select, rft_turn_mask
from practicum.episode import Episode, Turn


def episode(reward=1.0, malformed=None, **kwargs):
    turns = [
        Turn(sampled_ids=[10, 11], logprobs=[-0.1, -0.2], policy_version=0, observation_ids=[20]),
        Turn(sampled_ids=[12], logprobs=[-0.3], policy_version=0, observation_ids=[21, 22]),
        Turn(sampled_ids=[13, 14], logprobs=[-0.4, -0.5], policy_version=0),
    ]
    info = {} if malformed is None else {"malformed_turns": malformed}
    return Episode(
        task_id="t", group_id="g", prompt_ids=[1, 2], turns=turns, reward=reward, info=info,
        **kwargs,
    )


def test_rft_select_keeps_clean_successes_only():
    good = episode(1.0)
    bad = [episode(0.0), episode(1.0, failure="timeout"), episode(1.0, overlong=True)]
    kept = rft_select([good, *bad], min_reward=1.0)
    assert kept == [good]


def test_turn_mask_equals_loss_mask_without_malformed_turns():
    e = episode()
    assert rft_turn_mask(e) == e.loss_mask() == [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]


def test_turn_mask_zeroes_malformed_turns():
    # input ids: [1, 2 | 10, 11 | 20 | 12 | 21, 22 | 13, 14]; turn 1 (id 12) is malformed
    mask = rft_turn_mask(episode(malformed=[1]))
    assert mask == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    assert len(mask) == len(episode().input_ids())


def test_turn_mask_rejects_unknown_turn_index():
    with pytest.raises(ValueError, match=r"\[3\]"):
        rft_turn_mask(episode(malformed=[3]))


def test_rft_loss_is_masked_token_mean_nll():
    # -(ln .5 + ln .25) / 2 = (0.6931 + 1.3863) / 2 = 1.0397; the masked token is ignored
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.01]]))
    loss = rft_loss(logp, torch.tensor([[1, 1, 0]]))
    assert loss.item() == pytest.approx(1.0397, abs=1e-4)
