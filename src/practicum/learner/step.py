"""The learner: one training step for every objective, and checkpoints with exact resume.

One training step (DAPO / verl style) on a `TrainBatch` the driver built
(`practicum.learner.rows`; RL: `practicum.batch.rl_batch`, SFT/RFT: `practicum.finetune`):

    prox = log-probs of every row under the current weights, computed once, no grad
           (policy gradient with more than one update)
    for epoch in batch.epochs:
        for mini-batch in batch.mini_batches parts of the rows:
            loss = objective x per-token weights (+ KL)        (micro-batches, gradients summed)
            optimizer update, skipped when the gradient norm is not finite
    lr schedule step; step += 1

Objectives: `policy_gradient` is PPO-clip with the ratio pi / pi_prox (`algo.off_policy`: none,
tis, decoupled), so the first update's ratio is exactly 1 and clipping binds from the second
update on: that is what makes DAPO's clip-higher real; with a single update the proximal
log-probs are the update's own (detached). `cross_entropy` is SFT / RFT's -log pi of the masked
tokens at temperature 1 (`practicum.algo.rft.rft_loss`), token-mean over the mini-batch. The
formulas live in `practicum.algo`; the step itself is plain PyTorch.

Micro-batches hold `train.micro_batch_size` rows padded to the longest, or, under a token budget
(`train.max_tokens_per_micro_batch`), whole rows up to that many tokens, run as one packed
sequence (`HFTrainable.token_logprobs(packed=True)`); the loss reads the same per-row tensors
either way, so its aggregation does not change.

Sharded over several processes (`practicum.learner.sharded`), every rank runs this same step on
the whole batch's rows but takes only its part of each mini-batch (`split_ranks` over
`Ranks.data_world` shares of about equal tokens: the ranks of a sequence group take one share
together); the normalisers (the mini-batch's tokens or sequences) stay the whole mini-batch's,
so the ranks' gradients sum to the one-process gradient, and the logged sums are added up
across ranks. Every
rank runs the same number of forward passes (a rank with fewer rows pads with weightless ones):
a sharded model's forward is a collective. The gradient norm is taken over every shard, so a
non-finite one skips the update on every rank alike (verl and SkyRL skip such steps too).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor

from practicum.algo.losses import (
    aggregate_loss,
    approx_kl,
    clip_fraction,
    decoupled_ppo_loss,
    k3_kl,
    ppo_clip_loss,
    truncated_importance_weights,
)
from practicum.algo.rft import rft_loss
from practicum.config import Config
from practicum.engine.base import QuietPart, Trainable
from practicum.errors import TrainingError
from practicum.learner.checkpoint import load_checkpoint, save_checkpoint
from practicum.learner.ranks import Ranks, split_even, split_ranks, token_budget_batches
from practicum.learner.rows import TokenBatch, TrainBatch, TrainRow, pad_rows, token_batch


def lr_lambda(step: int, warmup: int, total: int, schedule: str) -> float:
    """Multiplier of the peak LR at training step `step`: linear warm-up, then constant, cosine
    or linear decay."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1 + math.cos(math.pi * frac)) if schedule == "cosine" else 1.0 - frac


def zero_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """AdamW's state as its first step would create it, created now: step 0 and zero moments
    for every parameter that has none yet (torch's `Adam._init_group`, non-fused, not
    capturable: the step count is a CPU scalar). A colocated engine started after this sizes
    its share of the GPU with the moments in place (verl PR #6912's failure is the other
    order). No update changes: the first step finds this state and counts 0 -> 1, as it
    would have from the state it creates."""
    scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    for group in optimizer.param_groups:
        if group.get("fused") or group.get("capturable"):
            raise ValueError(
                "zero_optimizer_state: only the default (non-fused, not "
                "capturable) AdamW is laid out here"
            )
        for p in group["params"]:
            state = optimizer.state[p]
            if state:
                continue
            state["step"] = torch.tensor(0.0, dtype=scalar)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if group.get("amsgrad"):
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def row_length(row: TrainRow) -> int:
    """A row's positions: its share of a micro-batch's token budget and of a rank's work."""
    return len(row.input_ids)


def colocated_engine(cfg: Config) -> bool:
    """A sampling engine shares the learner's GPU, sleeping through each train step: the
    learner's optimizer state must then exist before the engine starts (`zero_optimizer_state`)."""
    return cfg.engine.kind == "vllm" and cfg.engine.enable_sleep_mode


class Learner(QuietPart):
    def __init__(self, model: Trainable, cfg: Config, ranks: Ranks | None = None):
        self.model, self.cfg = model, cfg
        self.ranks = ranks or Ranks()
        """The processes this learner's step spans (one unless sharded)."""
        t = cfg.train
        self.params = [p for p in model.trainable_parameters() if p.requires_grad]
        self.device = self.params[0].device if self.params else torch.device("cpu")
        """The model's device: every batch tensor goes there before it meets the log-probs."""
        self.optimizer = torch.optim.AdamW(
            self.params, lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay
        )
        self.eager_state = colocated_engine(cfg)
        """The optimizer state is created now, not at the first step (`colocated_engine`)."""
        if self.eager_state:
            zero_optimizer_state(self.optimizer)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_lambda(s, t.warmup_steps, t.steps, t.schedule)
        )
        self.step = 0
        self.skipped_nonfinite = 0
        """Optimizer updates skipped for a non-finite gradient norm, over the run."""
        self.nonfinite_in_row = 0
        """Such updates in a row (`train.max_nonfinite_in_row` of them stop the run)."""

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
    def train_step(self, batch: TrainBatch) -> dict[str, Any] | None:
        """`batch.epochs` passes over its `batch.mini_batches` updates (module doc). None when
        no row has a token to train on: the weights and the step count stay as they were."""
        start = time.perf_counter()
        rows = [r for r in batch.rows if r.tokens]
        if not rows:
            return None
        pg = batch.objective == "policy_gradient"
        minis = split_even(rows, batch.mini_batches)
        n_updates = batch.epochs * len(minis)
        prox = self._proximal(minis) if pg and n_updates > 1 else None
        lr = self.scheduler.get_last_lr()[0]
        updates, seen = [], []  # seen: the first epoch's stats, one per mini-batch
        for epoch in range(batch.epochs):
            for mini in minis:
                stats = self._update(mini, prox, pg)
                if epoch == 0:
                    seen.append((stats, sum(r.tokens for r in mini)))
                updates.append(stats)
        self.scheduler.step()
        self.step += 1
        elapsed = time.perf_counter() - start
        n_tokens = sum(r.tokens for r in rows)
        mean = lambda k: sum(u[k] for u in updates) / len(updates)  # noqa: E731
        out = {
            "loss": mean("loss"),
            "grad_norm": mean("grad_norm"),
            "updates": float(len(updates)),
            "lr": lr,
            "train/skipped_nonfinite": float(self.skipped_nonfinite),
            "train_rows": float(len(rows)),
            "train_tokens": float(n_tokens),
            "learner_tokens_per_s": n_tokens * n_updates / elapsed,
            "learner_seconds": elapsed,
        }
        total = sum(n for _, n in seen)
        first = {k: sum(st[k] * n for st, n in seen) / total for k in ("entropy", "gap", "kl_ref")}
        out["entropy"] = first["entropy"]  # over the whole batch, as the first epoch saw it
        if not pg:
            return out
        return {
            **out,
            "clip_frac": mean("clip_frac"),
            "approx_kl": mean("approx_kl"),
            "clip_frac_per_update": [u["clip_frac"] for u in updates],
            "approx_kl_per_update": [u["approx_kl"] for u in updates],
            # trainer/sampler gap and KL to the base: over the whole batch, as the first
            # epoch saw it (before each mini-batch's own update)
            "logprob_gap": first["gap"],
            "kl_ref": first["kl_ref"],
            "logprob_gap_max": max(st["gap_max"] for st, _ in seen),
        }

    def _micro_batches(self, shares: list[list[TrainRow]]) -> list[tuple[list[TrainRow], bool]]:
        """This rank's rows (shares[rank]) in micro-batches (`micro_batch_size` rows, or whole
        rows up to `max_tokens_per_micro_batch` tokens), each with whether it is live: a rank
        with fewer micro-batches than another adds weightless ones (a row of another rank's,
        live False), so every rank runs the same number of passes."""
        per_rank = [self._split_micro(rows) for rows in shares]
        count = max(len(micros) for micros in per_rank)
        filler = next(rows[:1] for rows in shares if rows)
        mine = per_rank[self.ranks.data_rank]
        return [(m, True) for m in mine] + [(filler, False)] * (count - len(mine))

    def _split_micro(self, rows: list[TrainRow]) -> list[list[TrainRow]]:
        budget = self.cfg.train.max_tokens_per_micro_batch
        if budget is not None:
            return token_budget_batches(rows, budget, row_length)
        m = self.cfg.train.micro_batch_size
        return [rows[i : i + m] for i in range(0, len(rows), m)]

    @property
    def packed(self) -> bool:
        """Micro-batches run as packed sequences (with a token budget)."""
        return self.cfg.train.max_tokens_per_micro_batch is not None

    def _tokens(self, micro: list[TrainRow], pg: bool) -> TokenBatch:
        """A micro-batch's tensors on the model's device; grammar masks replayed for the
        policy gradient (cross-entropy trains the unconstrained distribution, as SFT did)."""
        return token_batch(
            micro, self.model.pad_id, self.device, self.model.tokenizer, replay_grammars=pg
        )

    @torch.no_grad()
    def _proximal(self, minis: list[list[TrainRow]]) -> dict[int, Tensor]:
        """Log-probs of this rank's rows under the weights before this step's first update, per
        row (keyed by id(row)), computed once (eval mode, no grad)."""
        parts = [split_ranks(mini, self.ranks.data_world, row_length) for mini in minis]
        shares = [[r for part in parts for r in part[k]] for k in range(self.ranks.data_world)]
        out = {}
        for micro, live in self._micro_batches(shares):
            tb = self._tokens(micro, True)
            logp = self.model.token_logprobs(
                tb.input_ids,
                tb.attention_mask,
                self.temperature,
                score_mask=tb.loss_mask,
                allowed=tb.allowed,
                packed=self.packed,
            )
            for r, lp in zip(micro, logp):
                if live:
                    out[id(r)] = lp[: len(r.input_ids)]
        return out

    def _update(
        self, mini: list[TrainRow], prox: dict[int, Tensor] | None, pg: bool
    ) -> dict[str, float]:
        """One optimizer update on a mini-batch (this rank's part of it), accumulated over
        micro-batches; normalised by the whole mini-batch's tokens (or sequences). Skipped
        (parameters, optimizer state and its step count untouched) when the gradient norm over
        every shard is not finite."""
        algo = self.cfg.algo
        tokens = sum(r.tokens for r in mini)
        seqs = len(mini)
        temperature = self.temperature if pg else 1.0
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(("loss", "clip", "kl", "entropy", "gap", "kl_ref"), 0.0)
        gap_max = 0.0
        for micro, live in self._micro_batches(
            split_ranks(mini, self.ranks.data_world, row_length)
        ):
            tb = self._tokens(micro, pg)
            logp, ent = self.model.token_logprobs(
                tb.input_ids,
                tb.attention_mask,
                temperature,
                return_entropy=True,
                score_mask=tb.loss_mask,
                allowed=tb.allowed,
                packed=self.packed,
            )
            mask = tb.loss_mask
            micro_tokens = mask.sum().item()
            if pg:
                old = (
                    logp.detach()
                    if prox is None or not live
                    else pad_rows([prox[id(r)] for r in micro], tb.input_ids.shape[1])
                )
                token_loss, clipped = self._objective(logp, old, tb)
                token_loss = token_loss * tb.weights
                if algo.kl_coef > 0:
                    with torch.no_grad(), self.model.frozen_base():
                        ref = self.model.token_logprobs(
                            tb.input_ids,
                            tb.attention_mask,
                            temperature,
                            score_mask=tb.loss_mask,
                            allowed=tb.allowed,
                            packed=self.packed,
                        )
                    kl = k3_kl(logp, ref)
                    token_loss = token_loss + algo.kl_coef * kl
                    sums["kl_ref"] += (kl.detach() * mask).sum().item() * live
                share = (
                    micro_tokens / max(1, tokens)
                    if algo.loss_agg == "token_mean"
                    else len(micro) / max(1, seqs)
                )
                loss = aggregate_loss(token_loss, mask, algo.loss_agg) * (share * live)
            else:  # SFT / RFT: token-mean cross-entropy over the whole mini-batch
                loss = rft_loss(logp, mask) * (micro_tokens / max(1, tokens) * live)
            loss.backward()
            if not live:
                continue
            with torch.no_grad():
                sums["loss"] += loss.item()
                sums["entropy"] += (ent.detach() * mask).sum().item()
                if pg:
                    gap = (old - tb.behaviour_logp).abs() * mask
                    sums["clip"] += clip_fraction(clipped, mask).item() * micro_tokens
                    sums["kl"] += approx_kl(logp.detach(), old, mask).item() * micro_tokens
                    sums["gap"] += gap.sum().item()
                    gap_max = max(gap_max, gap.max().item())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.grad_clip)
        if isinstance(grad_norm, DTensor):  # sharded parameters: the norm over every shard
            grad_norm = grad_norm.full_tensor()
        norm = float(grad_norm)
        if math.isfinite(norm):
            self.optimizer.step()
            self.nonfinite_in_row = 0
        else:
            self._skip_update(norm)
        keys = list(sums)
        sums = dict(zip(keys, self.ranks.sum([sums[k] for k in keys])))
        gap_max = self.ranks.max(gap_max)
        d = max(1, tokens)
        return {
            "loss": sums["loss"],
            "clip_frac": sums["clip"] / d,
            "approx_kl": sums["kl"] / d,
            "entropy": sums["entropy"] / d,
            "gap": sums["gap"] / d,
            "gap_max": gap_max,
            "kl_ref": sums["kl_ref"] / d,
            "grad_norm": norm,
        }

    def _skip_update(self, norm: float) -> None:
        """No optimizer step for a non-finite gradient norm (every rank sees the same norm);
        `train.max_nonfinite_in_row` such updates in a row stop the run."""
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped_nonfinite += 1
        self.nonfinite_in_row += 1
        limit = self.cfg.train.max_nonfinite_in_row
        if self.nonfinite_in_row >= limit:
            raise TrainingError(
                f"{self.nonfinite_in_row} optimizer updates in a row had a non-finite gradient "
                f"norm ({norm}), the last in training step {self.step + 1}; each was skipped. "
                f"Stopping (train.max_nonfinite_in_row={limit}): lower train.lr or look for "
                f"a broken batch; resume from the last checkpoint with run.resume=true"
            )

    def _objective(self, logp: Tensor, prox: Tensor, tb: TokenBatch) -> tuple[Tensor, Tensor]:
        """Token loss for the configured off-policy correction (algo.off_policy)."""
        algo = self.cfg.algo
        if algo.off_policy == "none":  # classic PPO: trust region around the behaviour policy
            return ppo_clip_loss(
                logp, tb.behaviour_logp, tb.advantages, algo.clip_low, algo.clip_high
            )
        if algo.off_policy == "decoupled":
            return decoupled_ppo_loss(
                logp,
                prox,
                tb.behaviour_logp,
                tb.advantages,
                algo.clip_low,
                algo.clip_high,
                iw_cap=algo.is_cap,
            )
        loss, clipped = ppo_clip_loss(logp, prox, tb.advantages, algo.clip_low, algo.clip_high)
        return loss * truncated_importance_weights(prox, tb.behaviour_logp, algo.is_cap), clipped

    # -- checkpoints (practicum.learner.checkpoint) ---------------------------------------------
    def save(self, ckpt_root: Path, extra: dict[str, Any], keep: int = 2) -> Path:
        return save_checkpoint(self, ckpt_root, extra, keep)

    def load(self, ckpt: Path) -> dict[str, Any]:
        extra = load_checkpoint(self, ckpt)
        if self.eager_state:  # a checkpoint saved before any step brings no moments
            zero_optimizer_state(self.optimizer)
        return extra
