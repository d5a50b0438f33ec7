"""The learner: one optimizer step per batch of episodes, checkpoints with exact resume.

Composes `practicum.batch` (advantages, weights) and `practicum.algo.losses` (objective);
the step itself is plain PyTorch: micro-batches, gradient accumulation, clipping, AdamW.
"""

from __future__ import annotations

import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
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
from practicum.batch import shaped_rewards, token_batch, turn_advantages, turn_duration_weights
from practicum.config import Config
from practicum.episode import Episode


def lr_lambda(step: int, warmup: int, total: int, schedule: str) -> float:
    """Multiplier of the peak LR: linear warm-up, then constant, cosine or linear decay."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1 + math.cos(math.pi * frac)) if schedule == "cosine" else 1.0 - frac


class Learner:
    def __init__(self, policy: Any, cfg: Config):
        self.policy, self.cfg = policy, cfg
        t = cfg.train
        self.params = [p for p in policy.trainable_parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=t.lr, betas=tuple(t.betas),
                                           weight_decay=t.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_lambda(s, t.warmup_steps, t.steps, t.schedule))
        self.step = 0
        self.pad_id = policy.tokenizer.pad_token_id or 0

    # -- one update ----------------------------------------------------------------------------
    def train_step(self, episodes: list[Episode]) -> dict[str, float]:
        cfg, algo = self.cfg, self.cfg.algo
        start = time.perf_counter()
        rewards = shaped_rewards(episodes, algo, cfg.rollout.max_seq_len)
        adv = turn_advantages(episodes, rewards, algo)
        wts = turn_duration_weights(episodes, algo, cfg.use_duration_weights)
        include = [not (algo.mask_overlong and e.overlong) and e.num_sampled > 0 for e in episodes]
        n_tokens = sum(e.num_sampled for e, inc in zip(episodes, include) if inc)
        n_seqs = sum(include)
        m = cfg.train.micro_batch_size
        self.policy.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {k: 0.0 for k in ("loss", "clip", "kl", "entropy", "gap", "kl_ref")}
        gap_max, n_seen = 0.0, 0
        for i in range(0, len(episodes), m):
            mb = token_batch(episodes[i:i + m], adv[i:i + m], wts[i:i + m], include[i:i + m],
                             self.pad_id)
            tokens = mb.loss_mask.sum().item()
            if tokens == 0:
                continue
            logp, ent = self.policy.token_logprobs(mb.input_ids, mb.attention_mask,
                                                   temperature=cfg.sampling.temperature or 1.0,
                                                   return_entropy=True)
            token_loss, clipped = self._objective(logp, mb)
            token_loss = token_loss * mb.weights
            if algo.kl_coef > 0:
                with torch.no_grad(), self.policy.frozen_base():
                    ref = self.policy.token_logprobs(mb.input_ids, mb.attention_mask,
                                                     temperature=cfg.sampling.temperature or 1.0)
                kl = k3_kl(logp, ref)
                token_loss = token_loss + algo.kl_coef * kl
                sums["kl_ref"] += (kl * mb.loss_mask).sum().item()
            if algo.loss_agg == "token_mean":
                share = tokens / max(1, n_tokens)
            else:
                share = (mb.loss_mask.sum(-1) > 0).sum().item() / max(1, n_seqs)
            loss = aggregate_loss(token_loss, mb.loss_mask, algo.loss_agg) * share
            loss.backward()
            with torch.no_grad():
                gap = (logp.detach() - mb.behaviour_logp).abs() * mb.loss_mask
                sums["loss"] += loss.item()
                sums["clip"] += clip_fraction(clipped, mb.loss_mask).item() * tokens
                sums["kl"] += approx_kl(logp.detach(), mb.behaviour_logp, mb.loss_mask).item() * tokens
                sums["entropy"] += (ent * mb.loss_mask).sum().item()
                sums["gap"] += gap.sum().item()
                gap_max = max(gap_max, gap.max().item())
            n_seen += tokens
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self.policy.bump_version()
        elapsed = time.perf_counter() - start
        d = max(1, n_seen)
        return {
            "loss": sums["loss"], "clip_frac": sums["clip"] / d, "approx_kl": sums["kl"] / d,
            "entropy": sums["entropy"] / d, "logprob_gap": sums["gap"] / d,
            "logprob_gap_max": gap_max, "grad_norm": float(grad_norm),
            "kl_ref": sums["kl_ref"] / d, "lr": self.scheduler.get_last_lr()[0],
            "train_tokens": float(n_seen), "learner_tokens_per_s": n_seen / elapsed,
            "learner_seconds": elapsed, "reward_shaped_mean": rewards.mean().item(),
        }

    def _objective(self, logp: torch.Tensor, mb) -> tuple[torch.Tensor, torch.Tensor]:
        """Token loss for the configured off-policy correction. One optimizer step per batch, so
        the proximal (pre-update) policy is the current weights: prox = logp.detach()."""
        algo = self.cfg.algo
        prox = logp.detach()
        if algo.off_policy == "none":  # classic PPO: trust region around the behaviour policy
            return ppo_clip_loss(logp, mb.behaviour_logp, mb.advantages, algo.clip_low, algo.clip_high)
        if algo.off_policy == "decoupled":
            return decoupled_ppo_loss(logp, prox, mb.behaviour_logp, mb.advantages,
                                      algo.clip_low, algo.clip_high, iw_cap=algo.is_cap)
        loss, clipped = ppo_clip_loss(logp, prox, mb.advantages, algo.clip_low, algo.clip_high)
        return loss * truncated_importance_weights(prox, mb.behaviour_logp, algo.is_cap), clipped

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self, ckpt_root: Path, extra: dict[str, Any], keep: int = 2) -> Path:
        """Write checkpoints/step_N atomically (temp dir + rename), then point `latest` at it."""
        ckpt_root.mkdir(parents=True, exist_ok=True)
        final = ckpt_root / f"step_{self.step:06d}"
        tmp = ckpt_root / f".tmp_step_{self.step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        self.policy.save(tmp / "policy")
        torch.save({
            "step": self.step, "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "extra": extra,
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state()},
        }, tmp / "trainer.pt")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        latest_tmp = ckpt_root / ".latest.tmp"
        latest_tmp.write_text(final.name)
        latest_tmp.replace(ckpt_root / "latest")
        for old in sorted(ckpt_root.glob("step_*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load(self, ckpt: Path) -> dict[str, Any]:
        self.policy.load_weights(ckpt / "policy")
        state = torch.load(ckpt / "trainer.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        return state["extra"]


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    pointer = ckpt_root / "latest"
    if not pointer.is_file():
        return None
    path = ckpt_root / pointer.read_text().strip()
    return path if (path / "trainer.pt").is_file() else None
