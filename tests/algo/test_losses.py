import math

import pytest
import torch

from practicum.algo.losses import (
    aggregate_loss,
    approx_kl,
    clip_fraction,
    decoupled_ppo_loss,
    k3_kl,
    ppo_clip_loss,
    truncated_importance_weights,
)


def logp_for(ratios, dtype=torch.float64):
    """Current log-probs giving these ratios against old log-probs of 0."""
    return torch.tensor([math.log(r) for r in ratios], dtype=dtype, requires_grad=True)


# -- ppo_clip_loss ------------------------------------------------------------------------------
def test_ppo_inside_trust_region_is_minus_ratio_times_advantage():
    old = torch.zeros(2, dtype=torch.float64)
    loss, clipped = ppo_clip_loss(logp_for([1.1, 0.9]), old, torch.tensor([2.0, -1.0]))
    assert torch.allclose(loss, torch.tensor([-2.2, 0.9], dtype=torch.float64))
    assert not clipped.any()


def test_ppo_positive_advantage_is_capped_by_clip_higher():
    # A = 1, r = 2 > 1.28: min(2, 1.28) = 1.28 -> loss -1.28, clipped, no gradient.
    logp = logp_for([2.0])
    loss, clipped = ppo_clip_loss(logp, torch.zeros(1, dtype=torch.float64), torch.tensor([1.0]))
    assert loss.item() == pytest.approx(-1.28)
    assert clipped.item()
    loss.sum().backward()
    assert logp.grad.item() == 0.0


def test_ppo_positive_advantage_low_ratio_is_not_clipped():
    # A = 1, r = 0.5 < 0.8: min(0.5, 0.8) = 0.5 -> the unclipped term stays, gradient flows.
    logp = logp_for([0.5])
    loss, clipped = ppo_clip_loss(logp, torch.zeros(1, dtype=torch.float64), torch.tensor([1.0]))
    assert loss.item() == pytest.approx(-0.5)
    assert not clipped.item()
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(-0.5)  # d(-r A)/dlogp = -r A


def test_ppo_negative_advantage_is_bound_by_the_lower_clip():
    # A = -1, r = 0.5: min(-0.5, -0.8) = -0.8 -> loss 0.8, clipped, no gradient.
    logp = logp_for([0.5])
    loss, clipped = ppo_clip_loss(logp, torch.zeros(1, dtype=torch.float64), torch.tensor([-1.0]))
    assert loss.item() == pytest.approx(0.8)
    assert clipped.item()
    loss.sum().backward()
    assert logp.grad.item() == 0.0


def test_ppo_negative_advantage_is_not_bound_above():
    # A = -1, r = 2: min(-2, -1.28) = -2 -> loss 2, unclipped: the upper bound never binds.
    logp = logp_for([2.0])
    loss, clipped = ppo_clip_loss(logp, torch.zeros(1, dtype=torch.float64), torch.tensor([-1.0]))
    assert loss.item() == pytest.approx(2.0)
    assert not clipped.item()
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(2.0)


def test_ppo_ratio_exactly_on_a_bound_is_not_clipped():
    # eps 0.25 makes both bounds exact in binary: r = 1.25 (A > 0) and r = 0.75 (A < 0).
    logp = logp_for([1.25, 0.75])
    loss, clipped = ppo_clip_loss(
        logp, torch.zeros(2, dtype=torch.float64), torch.tensor([1.0, -1.0]), 0.25, 0.25
    )
    assert torch.allclose(loss, torch.tensor([-1.25, 0.75], dtype=torch.float64))
    assert not clipped.any()
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([-1.25, 0.75], dtype=torch.float64))


def test_ppo_broadcasts_sequence_advantage_over_tokens():
    logp = torch.zeros(2, 3)
    loss, _ = ppo_clip_loss(logp, torch.zeros(2, 3), torch.tensor([[1.0], [-2.0]]))
    assert loss.shape == (2, 3)
    assert torch.allclose(loss, torch.tensor([[-1.0] * 3, [2.0] * 3]))


def test_ppo_does_not_backpropagate_into_old_logp():
    old = torch.zeros(1, requires_grad=True)
    loss, _ = ppo_clip_loss(torch.zeros(1, requires_grad=True), old, torch.tensor([1.0]))
    loss.sum().backward()
    assert old.grad is None


# -- decoupled PPO and TIS ----------------------------------------------------------------------
def test_decoupled_ppo_weights_by_prox_over_behaviour():
    # r_prox = 1 (logp == prox) so the PPO term is -A = -1; w = exp(0 - ln 0.5) = 2.
    logp = torch.zeros(1, requires_grad=True)
    loss, clipped = decoupled_ppo_loss(
        logp, torch.zeros(1), torch.tensor([math.log(0.5)]), torch.tensor([1.0]), 0.2, 0.28
    )
    assert loss.item() == pytest.approx(-2.0)
    assert not clipped.item()


def test_decoupled_ppo_clips_around_the_proximal_policy_not_the_behaviour():
    # pi / pi_behav = 2 would be clipped by plain PPO, but pi / pi_prox = 1.1 is inside.
    logp = torch.tensor([math.log(2.0)], dtype=torch.float64, requires_grad=True)
    prox = torch.tensor([math.log(2.0 / 1.1)], dtype=torch.float64)
    behav = torch.tensor([0.0], dtype=torch.float64)
    adv = torch.tensor([1.0])
    loss, clipped = decoupled_ppo_loss(logp, prox, behav, adv, 0.2, 0.28, iw_cap=None)
    w = 2.0 / 1.1
    assert loss.item() == pytest.approx(-w * 1.1)
    assert not clipped.item()
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(-w * 1.1)


def test_decoupled_ppo_drops_tokens_over_the_weight_cap():
    # w = pi_prox / pi_behav: e^3 ~ 20 > 5 is dropped (AReaL), e^1 ~ 2.72 <= 5 is kept as is.
    behav = torch.tensor([-3.0, -1.0])
    zero = torch.zeros(2)
    loss, _ = decoupled_ppo_loss(zero, zero, behav, torch.tensor([1.0, 1.0]), iw_cap=5.0)
    assert loss.tolist() == pytest.approx([0.0, -math.e])


def test_decoupled_ppo_weight_is_detached():
    prox = torch.zeros(1, requires_grad=True)
    behav = torch.zeros(1, requires_grad=True)
    logp = torch.zeros(1, requires_grad=True)
    loss, _ = decoupled_ppo_loss(logp, prox, behav, torch.tensor([1.0]))
    loss.sum().backward()
    assert prox.grad is None and behav.grad is None


def test_truncated_importance_weights_cap_and_detach():
    learner = torch.tensor([math.log(0.5), math.log(1.5), math.log(3.0)], requires_grad=True)
    w = truncated_importance_weights(learner, torch.zeros(3), cap=2.0)
    assert torch.allclose(w, torch.tensor([0.5, 1.5, 2.0]))
    assert not w.requires_grad


# -- aggregation ---------------------------------------------------------------------------------
LOSS = torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 99.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_token_mean_weighs_every_token_equally():
    # (1 + 2 + 3 + 10 + 20) / 5 = 7.2
    assert aggregate_loss(LOSS, MASK, "token_mean").item() == pytest.approx(7.2)


def test_seq_mean_averages_sequence_means():
    # (mean(1, 2, 3) + mean(10, 20)) / 2 = (2 + 15) / 2 = 8.5
    assert aggregate_loss(LOSS, MASK, "seq_mean").item() == pytest.approx(8.5)


def test_seq_mean_skips_sequences_without_tokens():
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    assert aggregate_loss(LOSS, mask, "seq_mean").item() == pytest.approx(2.0)


def test_all_zero_mask_gives_zero_loss_with_a_graph():
    loss = torch.ones(2, 3, requires_grad=True)
    for mode in ("token_mean", "seq_mean"):
        out = aggregate_loss(loss, torch.zeros(2, 3), mode)
        assert out.item() == 0.0
        out.backward()


def test_masked_tokens_get_no_gradient():
    loss = LOSS.clone().requires_grad_(True)
    aggregate_loss(loss, MASK, "token_mean").backward()
    assert torch.allclose(loss.grad, torch.tensor([[0.2, 0.2, 0.2], [0.2, 0.2, 0.0]]))


def test_unknown_aggregation_mode_is_named():
    with pytest.raises(ValueError, match="'sum'"):
        aggregate_loss(LOSS, MASK, "sum")


# -- KL, metrics, entropy --------------------------------------------------------------------------
def test_k3_kl_hand_value():
    # ref - logp = ln 2: 2 - ln 2 - 1 = 0.3069
    kl = k3_kl(torch.tensor([0.0]), torch.tensor([math.log(2.0)]))
    assert kl.item() == pytest.approx(1.0 - math.log(2.0), abs=1e-6)


def test_k3_kl_is_zero_for_equal_policies_and_never_negative():
    logp = torch.linspace(-5, 0, 11)
    assert torch.equal(k3_kl(logp, logp), torch.zeros(11))
    assert (k3_kl(logp, logp.flip(0)) >= 0).all()


def test_approx_kl_is_masked_mean_of_k3_old_to_new():
    # r = 2: (r - 1) - ln r = 0.3069; r = 0.5: -0.5 + ln 2 = 0.1931; third token masked.
    logp = torch.tensor([[math.log(2.0), math.log(0.5), 5.0]])
    kl = approx_kl(logp, torch.zeros(1, 3), torch.tensor([[1, 1, 0]]))
    assert kl.item() == pytest.approx((1 - math.log(2) + math.log(2) - 0.5) / 2, abs=1e-6)


def test_clip_fraction_counts_only_masked_tokens():
    clipped = torch.tensor([[True, False, True, True]])
    assert clip_fraction(clipped, torch.tensor([[1, 1, 1, 0]])).item() == pytest.approx(2 / 3)
