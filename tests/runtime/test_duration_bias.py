"""The duration bias of asynchronous policy gradient, reproduced with real concurrent actors
that really sleep, and removed by duration-aware weights (see practicum.runtime.duration_bias
for the mechanism and the estimator: time-sliced allocation, reward as advantage)."""

import pytest
import torch

from practicum.runtime.duration_bias import BiasConfig, expected_logit_update, run_bias_experiment

PI = torch.tensor([0.5, 0.5])
R = torch.tensor([0.3, 1.0])  # fast, slow
DT = torch.tensor([0.1, 1.0])


def test_expected_update_time_slice_reinforce_favours_the_fast_arm():
    # q = (pi/dt) normalised = (10/11, 1/11); coef = q * r = (3/11, 1/11); g = coef - pi * 4/11
    g = expected_logit_update(PI, R, DT, "reinforce", weighted=False)
    assert torch.allclose(g, torch.tensor([1 / 11, -1 / 11]))


def test_expected_update_duration_weights_restore_the_slow_arm():
    # w = dt / E_q[dt] = dt / (2/11) = (0.55, 5.5); q w r = (0.15, 0.5); g = q w r - pi * 0.65
    g = expected_logit_update(PI, R, DT, "reinforce", weighted=True)
    assert torch.allclose(g, torch.tensor([-0.175, 0.175]))
    assert torch.allclose(expected_logit_update(PI, R, DT, "reinforce", False, "per_action"), g)


def test_expected_update_batch_baseline_keeps_the_sign_with_two_arms():
    # E_q r = 4/11; g = q (r - 4/11) = (10/11 * -0.7/11, 1/11 * 7/11) = (-7/121, 7/121)
    g = expected_logit_update(PI, R, DT, "batch_grpo", weighted=False)
    assert torch.allclose(g, torch.tensor([-7 / 121, 7 / 121]))


def _run(steps: int = 40, **kw):
    """Fast arm ~5 ms, slow ~50 ms; 8 actor threads; 32 runs per step (about 1.5-6 s)."""
    return run_bias_experiment(BiasConfig(time_scale=0.05, batch=32, steps=steps, lr=1.0, seed=0,
                                          **kw))


def test_async_without_duration_weights_drifts_to_the_fast_arm():
    result = _run(duration_weights=False)
    assert result.final("slow") < 0.25
    assert result.completions["fast"] > 3 * result.completions["slow"]


def test_async_with_duration_weights_converges_to_the_slow_arm():
    assert _run(duration_weights=True).final("slow") > 0.9


def test_free_running_actors_have_no_duration_bias():
    """Control: a fresh arm per run makes completions ~ pi, so even unweighted updates converge."""
    assert _run(25, duration_weights=False, allocation="per_action").final("slow") > 0.9


def test_groups_estimator_needs_per_action_allocation():
    with pytest.raises(ValueError, match="per_action"):
        run_bias_experiment(BiasConfig(estimator="groups", allocation="time_slice", steps=1))
