"""The learner: a PPO update per rollout batch, and checkpoints with exact resume.

One training step (DAPO / verl style):

    rows = segments of the batch's episodes (overlong episodes masked out)
    prox = log-probs of every row under the current weights, computed once, no grad
    for epoch in train.epochs:
        for mini-batch in train.mini_batches parts of the rows:
            loss = PPO-clip(ratio = pi / pi_prox) x per-token weights (+ KL)  (micro-batches,
            optimizer update                                                  gradients summed)
    lr schedule step; step += 1

The first update's ratio is exactly 1, so clipping starts to bind from the second update on:
that is what makes DAPO's clip-higher real. With a single update the proximal log-probs are
the update's own (detached). Composes `practicum.batch` (advantages, weights) and
`practicum.algo.losses` (objectives); the step itself is plain PyTorch.

Sharded over several processes (`practicum.sharded`), every rank runs this same step on the
whole batch's rows but takes only its part of each mini-batch (`split_ranks`); the normalisers
(the mini-batch's tokens or sequences) stay the whole mini-batch's, so the ranks' gradients sum
to the one-process gradient, and the logged sums are added up across ranks. Every rank runs the
same number of forward passes (a rank with fewer rows pads with weightless ones): a sharded
model's forward is a collective.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor

from practicum.algo.baselines import TaskBaselines
from practicum.algo.losses import (
    aggregate_loss,
    approx_kl,
    clip_fraction,
    decoupled_ppo_loss,
    k3_kl,
    ppo_clip_loss,
    truncated_importance_weights,
)
from practicum.batch import (
    Row,
    TokenBatch,
    pad_rows,
    shaped_rewards,
    token_batch,
    trainable,
    training_rows,
    turn_advantages,
    turn_duration_weights,
)
from practicum.config import Config
from practicum.engine.base import QuietPart, Trainable
from practicum.episode import Episode
from practicum.learner.checkpoint import load_checkpoint, save_checkpoint
from practicum.learner.ranks import Ranks, split_even, split_ranks


def lr_lambda(step: int, warmup: int, total: int, schedule: str) -> float:
    """Multiplier of the peak LR at training step `step`: linear warm-up, then constant, cosine
    or linear decay."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1 + math.cos(math.pi * frac)) if schedule == "cosine" else 1.0 - frac


class Learner(QuietPart):
    def __init__(self, model: Trainable, cfg: Config, ranks: Ranks | None = None):
        self.model, self.cfg = model, cfg
        self.ranks = ranks or Ranks()
        """The processes this learner's step spans (one unless sharded)."""
        t = cfg.train
        self.params = [p for p in model.trainable_parameters() if p.requires_grad]
        self.device = self.params[0].device if self.params else torch.device("cpu")
        """The model's device: every batch tensor goes there before it meets the log-probs."""
        self.optimizer = torch.optim.AdamW(self.params, lr=t.lr, betas=tuple(t.betas),
                                           weight_decay=t.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_lambda(s, t.warmup_steps, t.steps, t.schedule))
        self.step = 0
        self.baselines = TaskBaselines(cfg.algo.baseline_window)
        """Per-task running baselines (algo.advantage = baseline), kept in checkpoints."""

    @property
    def temperature(self) -> float:
        """Log-probs are taken at the sampling temperature (greedy rollouts: T = 1)."""
        return self.cfg.sampling.temperature or 1.0

    # -- the runtime's Learner protocol (practicum.runtime.parts) -------------------------------
    @property
    def trainable(self) -> Trainable:
        return self.model

    def export_weights(self, version: int) -> Any:
        return self.model.export_weights(version)

    def save_policy(self, path: Path) -> None:
        self.model.save(path)


    # -- one training step ----------------------------------------------------------------------
    def train_step(self, episodes: list[Episode]) -> dict[str, Any] | None:
        """Several PPO updates on one batch (module doc). None when no row has a token to train
        on (every episode masked): the weights and the step count stay as they were."""
        cfg, algo = self.cfg, self.cfg.algo
        start = time.perf_counter()
        rewards = shaped_rewards(episodes, algo,
                                 cfg.sampling.max_new_tokens * cfg.rollout.max_turns)
        adv = turn_advantages(episodes, rewards, algo, self.baselines)
        include = trainable(episodes, algo)
        wts = turn_duration_weights(episodes, algo, include)
        rows = [r for r in training_rows(episodes, include) if r.tokens]
        if not rows:
            return None
        if algo.advantage == "baseline":
            self.baselines.update([e.task_id for e in episodes], rewards.tolist())
        minis = split_even(rows, cfg.train.mini_batches)
        n_updates = cfg.train.epochs * len(minis)
        prox = self._proximal(minis, adv, wts) if n_updates > 1 else None
        lr = self.scheduler.get_last_lr()[0]
        updates, seen = [], []  # seen: the first epoch's stats, one per mini-batch
        for epoch in range(cfg.train.epochs):
            for mini in minis:
                stats = self._update(mini, adv, wts, prox)
                if epoch == 0:
                    seen.append((stats, sum(r.tokens for r in mini)))
                updates.append({k: stats[k] for k in ("loss", "clip_frac", "approx_kl",
                                                      "grad_norm")})
        total = sum(n for _, n in seen)
        first = {k: sum(st[k] * n for st, n in seen) / total
                 for k in ("entropy", "gap", "kl_ref")}
        first["gap_max"] = max(st["gap_max"] for st, _ in seen)
        self.scheduler.step()
        self.step += 1
        elapsed = time.perf_counter() - start
        n_tokens = sum(r.tokens for r in rows)
        mean = lambda k: sum(u[k] for u in updates) / len(updates)  # noqa: E731
        return {
            "loss": mean("loss"), "clip_frac": mean("clip_frac"), "approx_kl": mean("approx_kl"),
            "grad_norm": mean("grad_norm"), "updates": float(len(updates)),
            "clip_frac_per_update": [u["clip_frac"] for u in updates],
            "approx_kl_per_update": [u["approx_kl"] for u in updates],
            # entropy, trainer/sampler gap and KL to the base: over the whole batch, as the
            # first epoch saw it (before each mini-batch's own update)
            "entropy": first["entropy"], "logprob_gap": first["gap"],
            "logprob_gap_max": first["gap_max"], "kl_ref": first["kl_ref"], "lr": lr,
            "train_rows": float(len(rows)), "train_tokens": float(n_tokens),
            "learner_tokens_per_s": n_tokens * n_updates / elapsed, "learner_seconds": elapsed,
            "reward_shaped_mean": rewards.mean().item(),
        }

    def _micro_batches(self, shares: list[list[Row]]) -> list[tuple[list[Row], bool]]:
        """This rank's rows (shares[rank]) in micro-batches, each with whether it is live: a
        rank with fewer micro-batches than another adds weightless ones (a row of another
        rank's, live False), so every rank runs the same number of passes."""
        m = self.cfg.train.micro_batch_size
        mine = shares[self.ranks.rank]
        out = [(mine[i:i + m], True) for i in range(0, len(mine), m)]
        count = max(math.ceil(len(rows) / m) for rows in shares)
        filler = next(rows[:1] for rows in shares if rows)
        return out + [(filler, False)] * (count - len(out))

    @torch.no_grad()
    def _proximal(self, minis: list[list[Row]], adv, wts) -> dict[int, Tensor]:
        """Log-probs of this rank's rows under the weights before this step's first update, per
        row (keyed by id(row)), computed once (eval mode, no grad)."""
        parts = [split_ranks(mini, self.ranks.world) for mini in minis]
        shares = [[r for part in parts for r in part[k]] for k in range(self.ranks.world)]
        out = {}
        for micro, live in self._micro_batches(shares):
            tb = token_batch(micro, adv, wts, self.model.pad_id, self.device,
                             self.model.tokenizer)
            logp = self.model.token_logprobs(tb.input_ids, tb.attention_mask, self.temperature,
                                             score_mask=tb.loss_mask, allowed=tb.allowed)
            for r, lp in zip(micro, logp):
                if live:
                    out[id(r)] = lp[:len(r.segment.input_ids)]
        return out

    def _update(self, mini: list[Row], adv, wts, prox: dict[int, Tensor] | None
                ) -> dict[str, float]:
        """One optimizer update on a mini-batch (this rank's part of it), accumulated over
        micro-batches; normalised by the whole mini-batch's tokens (or sequences)."""
        algo = self.cfg.algo
        tokens = sum(r.tokens for r in mini)
        seqs = len(mini)
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(("loss", "clip", "kl", "entropy", "gap", "kl_ref"), 0.0)
        gap_max = 0.0
        for micro, live in self._micro_batches(split_ranks(mini, self.ranks.world)):
            tb = token_batch(micro, adv, wts, self.model.pad_id, self.device,
                             self.model.tokenizer)
            logp, ent = self.model.token_logprobs(tb.input_ids, tb.attention_mask,
                                                  self.temperature, return_entropy=True,
                                                  score_mask=tb.loss_mask, allowed=tb.allowed)
            old = (logp.detach() if prox is None or not live else
                   pad_rows([prox[id(r)] for r in micro], tb.input_ids.shape[1]))
            token_loss, clipped = self._objective(logp, old, tb)
            token_loss = token_loss * tb.weights
            mask = tb.loss_mask
            if algo.kl_coef > 0:
                with torch.no_grad(), self.model.frozen_base():
                    ref = self.model.token_logprobs(tb.input_ids, tb.attention_mask,
                                                    self.temperature, score_mask=tb.loss_mask,
                                                    allowed=tb.allowed)
                kl = k3_kl(logp, ref)
                token_loss = token_loss + algo.kl_coef * kl
                sums["kl_ref"] += (kl.detach() * mask).sum().item() * live
            micro_tokens = mask.sum().item()
            share = (micro_tokens / max(1, tokens) if algo.loss_agg == "token_mean"
                     else len(micro) / max(1, seqs))
            loss = aggregate_loss(token_loss, mask, algo.loss_agg) * (share * live)
            loss.backward()
            if not live:
                continue
            with torch.no_grad():
                gap = (old - tb.behaviour_logp).abs() * mask
                sums["loss"] += loss.item()
                sums["clip"] += clip_fraction(clipped, mask).item() * micro_tokens
                sums["kl"] += approx_kl(logp.detach(), old, mask).item() * micro_tokens
                sums["entropy"] += (ent.detach() * mask).sum().item()
                sums["gap"] += gap.sum().item()
                gap_max = max(gap_max, gap.max().item())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.grad_clip)
        self.optimizer.step()
        keys = list(sums)
        sums = dict(zip(keys, self.ranks.sum([sums[k] for k in keys])))
        gap_max = self.ranks.max(gap_max)
        if isinstance(grad_norm, DTensor):  # sharded parameters: the norm over every shard
            grad_norm = grad_norm.full_tensor()
        d = max(1, tokens)
        return {"loss": sums["loss"], "clip_frac": sums["clip"] / d, "approx_kl": sums["kl"] / d,
                "entropy": sums["entropy"] / d, "gap": sums["gap"] / d, "gap_max": gap_max,
                "kl_ref": sums["kl_ref"] / d, "grad_norm": float(grad_norm)}

    def _objective(self, logp: Tensor, prox: Tensor, tb: TokenBatch) -> tuple[Tensor, Tensor]:
        """Token loss for the configured off-policy correction (algo.off_policy)."""
        algo = self.cfg.algo
        if algo.off_policy == "none":  # classic PPO: trust region around the behaviour policy
            return ppo_clip_loss(logp, tb.behaviour_logp, tb.advantages, algo.clip_low,
                                 algo.clip_high)
        if algo.off_policy == "decoupled":
            return decoupled_ppo_loss(logp, prox, tb.behaviour_logp, tb.advantages,
                                      algo.clip_low, algo.clip_high, iw_cap=algo.is_cap)
        loss, clipped = ppo_clip_loss(logp, prox, tb.advantages, algo.clip_low, algo.clip_high)
        return loss * truncated_importance_weights(prox, tb.behaviour_logp, algo.is_cap), clipped

    # -- checkpoints (practicum.learner.checkpoint) ---------------------------------------------
    def save(self, ckpt_root: Path, extra: dict[str, Any], keep: int = 2) -> Path:
        return save_checkpoint(self, ckpt_root, extra, keep)

    def load(self, ckpt: Path) -> dict[str, Any]:
        return load_checkpoint(self, ckpt)
