"""Per-token policy losses (PPO-clip, decoupled PPO, TIS), their aggregation, KL and metrics.

Shapes: log-prob, advantage and mask tensors are [B, T] (or broadcastable to it); a token loss
is a quantity to *minimise*.
"""

from __future__ import annotations

import torch
from torch import Tensor

AGGREGATION_MODES = ("token_mean", "seq_mean")


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
) -> tuple[Tensor, Tensor]:
    """PPO-clip with asymmetric bounds (Schulman et al. 2017, arXiv 1707.06347; DAPO
    clip-higher, Yu et al. 2025, arXiv 2503.14476):

        r = exp(logp - old_logp)
        L = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)

    For A > 0 only the ceiling 1 + eps_high binds, for A < 0 only the floor 1 - eps_low.
    `clipped` is True where the clipped term is strictly smaller, i.e. where the token gets no
    gradient; a ratio exactly on a bound is inside the trust region (not clipped).

    Returns: (token_loss [B, T], clipped [B, T] bool).
    """
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * advantages
    clipped_obj = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    clipped = clipped_obj < unclipped
    return -torch.where(clipped, clipped_obj, unclipped), clipped


def decoupled_ppo_loss(
    logp: Tensor,
    prox_logp: Tensor,
    behaviour_logp: Tensor,
    advantages: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    iw_cap: float | None = 5.0,
) -> tuple[Tensor, Tensor]:
    """Decoupled PPO for asynchronous RL (Hilton et al. 2021, arXiv 2110.00641; AReaL, Fu et al.
    2025, arXiv 2505.24298):

        w = pi_prox / pi_behav                       detached
        r_prox = exp(logp - prox_logp)
        L = -w * min(r_prox A, clip(r_prox, 1 - eps_low, 1 + eps_high) A)   where w <= iw_cap
        L = 0                                                               where w >  iw_cap

    The trust region is centred on the proximal policy (the learner's weights before this
    batch's updates), not on the stale behaviour policy that sampled the tokens; w corrects for
    the mismatch, and tokens whose w exceeds the cap are dropped, as AReaL does (TIS truncates
    them instead: `truncated_importance_weights`). iw_cap=None keeps every token.

    Returns: (token_loss [B, T], clipped [B, T] bool, as in `ppo_clip_loss`).
    """
    weight = torch.exp(prox_logp - behaviour_logp).detach()
    if iw_cap is not None:
        weight = torch.where(weight <= iw_cap, weight, torch.zeros_like(weight))
    token_loss, clipped = ppo_clip_loss(logp, prox_logp, advantages, eps_low, eps_high)
    return weight * token_loss, clipped


def truncated_importance_weights(
    learner_logp: Tensor, behaviour_logp: Tensor, cap: float = 2.0
) -> Tensor:
    """Truncated importance sampling, TIS (Yao et al. 2025, "Your efficient RL framework
    secretly brings you off-policy RL training"):

        w = min(exp(learner_logp - behaviour_logp), cap)       detached

    Corrects for the sampler (behaviour) and learner computing different probabilities for the
    same tokens; multiply the token loss by w.  Returns: weights shaped like the inputs.
    """
    return torch.exp(learner_logp - behaviour_logp).clamp(max=cap).detach()


def aggregate_loss(token_loss: Tensor, mask: Tensor, mode: str = "token_mean") -> Tensor:
    """Reduce a [B, T] token loss to a scalar over the positions where mask is 1.

    token_mean: sum(L * m) / sum(m) over the whole batch; every token weighs the same, so long
        sequences are not diluted (DAPO token-level loss, arXiv 2503.14476).
    seq_mean:   mean over sequences of each sequence's masked token mean (original GRPO,
        arXiv 2402.03300); sequences whose mask is all zero are skipped.

    Per-token weights (duration, importance) are applied by the caller to token_loss first.
    An all-zero mask gives 0 (still attached to the graph).
    """
    mask = mask.to(token_loss.dtype)
    masked = token_loss * mask
    if mode == "token_mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if mode == "seq_mean":
        tokens = mask.sum(dim=-1)
        seq_means = masked.sum(dim=-1) / tokens.clamp(min=1.0)
        has_tokens = (tokens > 0).to(token_loss.dtype)
        return (seq_means * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {AGGREGATION_MODES}")


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref) per token, for tokens sampled from pi
    (http://joschu.net/blog/kl-approx.html):

        k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1   >= 0, unbiased, low variance.
    """
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


@torch.no_grad()
def approx_kl(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """Metric: masked mean of k3 for KL(pi_old || pi), tokens sampled from pi_old
    (= mean of (r - 1) - log r with r = exp(logp - old_logp)). Scalar, no gradient."""
    return _masked_mean(k3_kl(old_logp, logp), mask)


@torch.no_grad()
def clip_fraction(clipped: Tensor, mask: Tensor) -> Tensor:
    """Metric: fraction of masked tokens whose clipped PPO term was active. Scalar."""
    return _masked_mean(clipped.to(torch.get_default_dtype()), mask)
