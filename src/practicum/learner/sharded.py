"""The learner sharded over processes with FSDP2 (`torch.distributed.fsdp.fully_shard`).

    every rank:  Learner(ShardedTrainable(HFTrainable), cfg, GroupRanks(...))

Each decoder layer, then the whole model, is one FSDP2 unit: a rank keeps 1/N of every
parameter, gradient and AdamW moment, and gathers a layer's full weights only while it runs.
The step code is `practicum.learner.step.Learner`'s: each rank trains on its part of every mini-batch
with the whole mini-batch's normaliser, and FSDP's reduce-scatter *sums* the ranks' gradients
(its default averages over ranks: `set_gradient_divide_factor(1)`), so N ranks make the update
one process makes. Gradient clipping takes the norm over every shard (DTensor gradients). With
full fine-tuning and a KL term the frozen reference is sharded the same way.

On a GPU, weights are kept in fp32 (the master copy AdamW updates) and gathered and computed in
bf16, gradients reduced in fp32 (`MixedPrecisionPolicy`); on a CPU nothing is cast. Backend: nccl
on GPU, gloo on CPU.

Checkpoints stay sharded: each rank writes its own shards of the weights and the AdamW state
(`practicum.learner.checkpoint`, torch.distributed.checkpoint), readable at any number of ranks,
one process included. Exports (the policy folder, a sampler's weights) are gathered full
tensors in one process's layout.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from practicum.engine.base import WeightUpdate
from practicum.engine.hf_trainable import HFTrainable
from practicum.errors import PracticumError
from practicum.learner.ranks import Ranks
from practicum.learner.step import Learner


def init_ranks(device_type: str, timeout_s: float) -> None:
    """Join the process group from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (set by
    torchrun or by the Ray learner group): nccl on GPU, gloo on CPU. A collective that waits
    longer than `timeout_s` for another rank fails instead of hanging."""
    if dist.is_initialized():
        return
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                            timeout=timedelta(seconds=timeout_s))


class _Forward(nn.Module):
    """Runs `HFTrainable.token_logprobs` as this module's forward, so that FSDP's root hooks
    (gather before, reduce-scatter after backward) wrap the whole computation, output head
    included (it is read outside the backbone's forward)."""

    def __init__(self, inner: HFTrainable, model: nn.Module, reference: bool):
        super().__init__()
        self.model = model
        self._inner, self._reference = inner, reference

    def forward(self, *args, **kwargs):
        if self._reference:
            with self._inner.frozen_base():
                return self._inner.token_logprobs(*args, **kwargs)
        return self._inner.token_logprobs(*args, **kwargs)


def _shard(lm: nn.Module, root: nn.Module, mp: MixedPrecisionPolicy) -> nn.Module:
    """fully_shard each decoder layer of `lm` (transformers' `_no_split_modules`), then `root`."""
    layer_types = set(getattr(lm, "_no_split_modules", None) or ())
    layers = [m for m in lm.modules() if type(m).__name__ in layer_types]
    if not layers:
        raise PracticumError(f"cannot shard {type(lm).__name__}: it names no decoder layer class "
                             "(_no_split_modules)")
    for unit in [*layers, root]:
        fully_shard(unit, mp_policy=mp)
        unit.set_gradient_divide_factor(1.0)  # the ranks' losses are shares of one: sum them
        unit.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
    return root


class ShardedTrainable:
    """A `Trainable` whose weights are sharded over the process group (module doc). Every call
    is a collective: each rank makes it, in the same order."""

    def __init__(self, inner: HFTrainable, kl_reference: bool):
        self.inner, self.tokenizer, self.pad_id = inner, inner.tokenizer, inner.pad_id
        self.device = inner.device
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if inner.device.type == "cuda" else MixedPrecisionPolicy())
        # the gathered head's storage is refilled in place: no fp32 copy cached across steps
        inner.logits.cache_fp32_head = False
        # no shared-prompt pass: it runs each layer twice in one forward, and whether it does
        # differs between ranks' rows, so their gathers and reductions would no longer pair up
        inner.min_shared_prefix = 1 << 62
        self.policy = _shard(inner.lm, _Forward(inner, inner.model, reference=False), mp)
        self.reference = None
        """The frozen base sharded on its own (full fine-tuning with a KL term); with LoRA it is
        the policy with its adapter off."""
        if kl_reference and not inner.cfg.lora:
            ref = inner.reference.lm
            self.reference = _shard(ref, _Forward(inner, ref, reference=True), mp)
        self._in_base = False
        self.names = [n for n, p in inner.model.named_parameters() if p.requires_grad]
        """The trainable parameters' names, in the optimizer's order."""

    def token_logprobs(self, input_ids: Tensor, attention_mask: Tensor, temperature: float = 1.0,
                       return_entropy: bool = False, score_mask: Tensor | None = None,
                       allowed: Tensor | None = None):
        root = self.reference if self._in_base and self.reference is not None else self.policy
        return root(input_ids, attention_mask, temperature, return_entropy=return_entropy,
                    score_mask=score_mask, allowed=allowed)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return self.inner.trainable_parameters()

    @property
    def module(self) -> nn.Module:
        """The sharded model (its parameters DTensors), named as the unsharded one."""
        return self.inner.model

    @contextmanager
    def frozen_base(self) -> Iterator[ShardedTrainable]:
        if self.inner.cfg.lora:  # the same sharded model, adapter off
            with self.inner.frozen_base():
                yield self
            return
        self._in_base = True
        try:
            yield self
        finally:
            self._in_base = False

    # -- gathered weights --------------------------------------------------------------------
    def full_state(self) -> dict[str, Tensor]:
        """The trainable weights as full CPU tensors on rank 0 (every weight with full
        fine-tuning, the adapter with LoRA); {} on the other ranks."""
        return get_model_state_dict(self.inner.model, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True, ignore_frozen_params=self.inner.cfg.lora))

    def export_weights(self, version: int) -> WeightUpdate | None:
        """The full weights for a sampler (rank 0; None on the others)."""
        full = self.full_state()
        return self.inner.export_weights(version, state_dict=full) if _rank() == 0 else None

    def save(self, path: Path) -> None:
        """Rank 0 writes the gathered weights as `HFTrainable.save` does."""
        full = self.full_state()
        if _rank() == 0:
            self.inner.save(path, state_dict=full)

    def load_weights(self, path: Path) -> None:
        """Every rank reads the saved policy and keeps its shard of it."""
        full = self.inner.read_weights(Path(path))
        if self.inner.cfg.lora:  # saved without the adapter's name: back to parameter names
            full = {self._adapter_names()[k]: v for k, v in full.items()}
        set_model_state_dict(self.inner.model, full,
                             options=StateDictOptions(full_state_dict=True, strict=False))

    def _adapter_names(self) -> dict[str, str]:
        """Saved adapter key -> parameter name, as peft itself renames them on save."""
        from peft import get_peft_model_state_dict

        probe = {n: torch.tensor(i) for i, n in enumerate(self.names)}
        saved = get_peft_model_state_dict(self.inner.model, state_dict=probe)
        return {k: self.names[int(v)] for k, v in saved.items()}


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


class GroupRanks(Ranks):
    """The process group's ranks, for `Learner` (statistics summed; a format-1 checkpoint's
    optimizer state, in one process's layout, restored into each rank's shards)."""

    in_group = True

    def __init__(self, model: ShardedTrainable):
        self.model = model
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.model.device)
        dist.all_reduce(t)
        return t.tolist()

    def max(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.model.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def gather(self, value: Any) -> list[Any]:
        out = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        names = self.model.names
        full = {"state": {names[i]: s for i, s in state["state"].items()},
                "param_groups": [{**g, "params": [names[i] for i in g["params"]]}
                                 for g in state["param_groups"]]}
        set_optimizer_state_dict(self.model.inner.model, optimizer, full,
                                 options=StateDictOptions(full_state_dict=True))

    def barrier(self) -> None:
        dist.barrier()


def sharded_learner(cfg, policy) -> Learner:
    """This rank's `Learner` over its shard of the policy (the process group already joined).
    On a GPU the weights load in fp32 (master copy) unless model.dtype says otherwise, and each
    rank uses its LOCAL_RANK's device."""
    from dataclasses import replace

    from practicum.engine.factory import load_trainable
    from practicum.engine.hf_model import pick_device

    device = pick_device(policy.device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", device.index or 0)))
        policy = replace(policy, device="cuda", dtype="float32" if policy.dtype == "auto"
                         else policy.dtype)
    model = ShardedTrainable(load_trainable(policy), kl_reference=cfg.algo.kl_coef > 0)
    return Learner(model, cfg, GroupRanks(model))
