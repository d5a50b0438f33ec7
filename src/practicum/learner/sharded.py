"""The learner sharded over processes with FSDP2 (`torch.distributed.fsdp.fully_shard`).

    every rank:  Learner(ShardedTrainable, cfg, GroupRanks(...))      (`sharded_learner`)

Each decoder layer, then the whole model, is one FSDP2 unit over a device mesh
(`learner_mesh`). Full sharding (the default): a rank keeps 1/N of every parameter, gradient
and AdamW moment, and gathers a layer's full weights from all N ranks only while it runs.
Hybrid sharding (HSDP, `placement.mesh.replicate: R`): the N ranks form an R x (N / R) mesh,
each of the R copies of the model sharded over its N / R ranks, which gather among themselves
only (one copy per node keeps the gathers off the slower link between nodes); gradients are
reduce-scattered within a copy, then all-reduced across copies.
The model is built on the meta device and filled from rank 0's reads of the weight files, so
no rank ever holds the whole model (`practicum.learner.load`).
The step code is `practicum.learner.step.Learner`'s: each rank (of every copy) trains on its
part of every mini-batch with the whole mini-batch's normaliser, and FSDP's reductions *sum*
the ranks' gradients over the whole mesh (its default averages over ranks:
`set_gradient_divide_factor(1)` with plain SUM reductions, `set_force_sum_reduction_for_comms`,
makes both HSDP steps sums), so N ranks make the update one process makes, whatever the mesh.
Gradient clipping takes the norm over every shard (DTensor gradients). With full fine-tuning
and a KL term the frozen reference is sharded the same way.
Sequence parallelism (`placement.mesh.sequence: S`, `practicum.learner.sequence`) is a second,
independent grouping of the same ranks: S consecutive ranks take one share of the rows and each
computes 1 / S of every row's positions (Ulysses attention), while FSDP2 still shards over the
mesh above; each rank's gradient is its positions' part, so the same sums give one process's.

Precision (`load.mixed_precision`): on a GPU full fine-tuning keeps fp32 weights (the master
copy AdamW updates) and gathers and computes in bf16, reducing gradients in fp32; LoRA keeps its
frozen base in the compute dtype. On a CPU nothing is cast. Backend: nccl on GPU (with
asynchronous error handling that raises: `init_ranks`), gloo on CPU, bound to
`placement.network.address` when set (`gloo_backend`).

Checkpoints stay sharded: each rank writes its own shards of the weights and the AdamW state
(`practicum.learner.checkpoint`, torch.distributed.checkpoint), readable at any number of ranks,
one process included. Exports stream: `iter_full_tensors` gathers one tensor at a time on rank
0, in the compute dtype, and rank 0 writes it to the policy folder (`save`,
`practicum.learner.export`) or adds it to the sampler's update (`export_weights`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from practicum.engine.base import WeightUpdate
from practicum.engine.constraint import GrammarMasks
from practicum.engine.device import configure_threads
from practicum.engine.hf_model import (
    PolicyConfig,
    check_attn_implementation,
    load_tokenizer,
    resolve_dtype,
    uses_checkpointing,
)
from practicum.engine.hf_trainable import HFTrainable, cast_floating, distinct_tensors
from practicum.engine.models import resolve_model
from practicum.engine.weight_group import meta_of
from practicum.engine.weight_stream import Membership, WeightTarget, send_stream
from practicum.errors import PracticumError
from practicum.learner import load
from practicum.learner.export import SAVE_FILE_BYTES, save_policy_folder
from practicum.learner.ranks import Ranks
from practicum.learner.sequence import SequenceParallelTrainable, SequenceRanks, sequence_groups
from practicum.learner.shards import gather_rows
from practicum.learner.step import Learner


def init_ranks(
    device_type: str, timeout_s: float, address: str | None = None, interface: str | None = None
) -> None:
    """Join the process group from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (set by
    torchrun or by the Ray learner group): nccl on GPU, gloo on CPU (its sockets bound to
    `address` when given: `gloo_backend`). `interface` (e.g. eth0) becomes GLOO_SOCKET_IFNAME
    and NCCL_SOCKET_IFNAME unless they are set. A collective that waits longer than
    `timeout_s` for another rank fails instead of hanging: with NCCL the watchdog aborts the
    communicator and the waiting call raises (TORCH_NCCL_ASYNC_ERROR_HANDLING=2, unless set;
    torch's default, 3, ends the process without an error to read)."""
    if dist.is_initialized():
        return
    if interface:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)
    if device_type == "cuda":
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
        backend = "nccl"
    else:
        backend = gloo_backend(address)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))


def gloo_backend(address: str | None) -> str:
    """The name of a gloo backend whose sockets bind to `address` (registered once per
    address: `init_process_group` builds gloo's device from the host name or
    GLOO_SOCKET_IFNAME only, never from an address); "gloo" for None."""
    if not address:
        return "gloo"
    name = "gloo_at_" + "".join(c if c.isalnum() else "_" for c in address)
    if not hasattr(dist.Backend, name.upper()):

        def build(store, rank: int, size: int, timeout: timedelta):
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
            return dist.ProcessGroupGloo(store, rank, size, options)

        dist.Backend.register_backend(name, build, devices=["cpu"])
    return name


def learner_mesh(device_type: str, replicate: int) -> DeviceMesh:
    """The device mesh of the process group's ranks: ("shard",) over all of them, or
    ("replicate", "shard") of `replicate` copies of consecutive ranks (rank 0 in copy 0)."""
    world = dist.get_world_size()
    if replicate == 1:
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    if world % replicate:
        raise PracticumError(
            f"placement.mesh.replicate={replicate}: {world} ranks do not split "
            "into that many copies"
        )
    return init_device_mesh(
        device_type, (replicate, world // replicate), mesh_dim_names=("replicate", "shard")
    )


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


def decoder_layers(lm: nn.Module) -> list[nn.Module]:
    """The decoder layers of `lm` (transformers' `_no_split_modules`), in order; sharded ones
    too (`fully_shard` makes each an instance of a subclass, FSDP<class>)."""
    layer_types = set(getattr(lm, "_no_split_modules", None) or ())
    layers = [m for m in lm.modules() if any(c.__name__ in layer_types for c in type(m).__mro__)]
    if not layers:
        raise PracticumError(
            f"cannot shard {type(lm).__name__}: it names no decoder layer class (_no_split_modules)"
        )
    return layers


def _shard(lm: nn.Module, root: nn.Module, mp: MixedPrecisionPolicy, mesh: DeviceMesh) -> nn.Module:
    """fully_shard each decoder layer of `lm`, then `root`, over `mesh`."""
    for unit in [*decoder_layers(lm), root]:
        fully_shard(unit, mesh=mesh, mp_policy=mp)
        # the ranks' losses are shares of one: sum them over the whole mesh, in plain SUMs
        # (gloo has no PREMUL_SUM; with HSDP both the reduce-scatter and the all-reduce)
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return root


class ShardedTrainable:
    """A `Trainable` whose weights are sharded over the process group (module doc). Every call
    is a collective: each rank makes it, in the same order. Built by `sharded_trainable` (on
    the meta device, then filled)."""

    def __init__(
        self,
        inner: HFTrainable,
        reference: nn.Module | None,
        mp: MixedPrecisionPolicy,
        export_dtype: torch.dtype | None,
        mesh: DeviceMesh,
    ):
        self.inner, self.tokenizer, self.pad_id = inner, inner.tokenizer, inner.pad_id
        self.device = inner.device
        self.export_dtype = export_dtype
        """The dtype of exports and saved folders (the weights' compute dtype); None: each
        tensor's own (a LoRA adapter computes in its fp32)."""
        # the gathered head's storage is refilled in place: no fp32 copy cached across steps
        inner.logits.cache_fp32_head = False
        # no shared-prompt pass: it runs each layer twice in one forward, and whether it does
        # differs between ranks' rows, so their gathers and reductions would no longer pair up
        inner.min_shared_prefix = 1 << 62
        self.mesh = mesh
        self.policy = _shard(inner.lm, _Forward(inner, inner.model, reference=False), mp, mesh)
        self.reference = None
        """The frozen base sharded on its own (full fine-tuning with a KL term); with LoRA it is
        the policy with its adapter off."""
        if reference is not None:
            self.reference = _shard(reference, _Forward(inner, reference, reference=True), mp, mesh)
        self._in_base = False
        self.names = [n for n, p in inner.model.named_parameters() if p.requires_grad]
        """The trainable parameters' names, in the optimizer's order."""

    def token_logprobs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        temperature: float = 1.0,
        return_entropy: bool = False,
        score_mask: Tensor | None = None,
        allowed: GrammarMasks | None = None,
        packed: bool = False,
    ):
        root = self.reference if self._in_base and self.reference is not None else self.policy
        return root(
            input_ids,
            attention_mask,
            temperature,
            return_entropy=return_entropy,
            score_mask=score_mask,
            allowed=allowed,
            packed=packed,
        )

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
    def iter_full_tensors(
        self, dtype: torch.dtype | None = None, max_gather_bytes: int | None = None
    ) -> Iterator[tuple[str, Tensor]]:
        """`HFTrainable.iter_full_tensors` over the shards: the trainable weights (the adapter
        with LoRA, every weight with full fine-tuning) one at a time, each cast to `dtype` when
        floating and gathered whole on rank 0 (`rows.gather_rows`: the other ranks send their
        shard and hold no full tensor; with HSDP only copy 0's ranks send), yielded on rank 0
        only, on its device. Every rank must run it to the end: each tensor is a collective.
        `max_gather_bytes`: each gather's staging at most that (`gather_rows`)."""
        for name, t in distinct_tensors(self.inner.trainable_state())[0].items():
            if isinstance(t, DTensor):
                full = gather_rows(t, dtype if t.is_floating_point() else None, max_gather_bytes)
            else:
                full = cast_floating(t.detach(), dtype)
            if _rank() == 0:
                yield name, full
            del full

    def export_weights(self, version: int) -> WeightUpdate | None:
        """The full weights for a sampler in the compute dtype, on rank 0's CPU (None on the
        other ranks), named and tied as the one-process `HFTrainable.export_weights` names
        them."""
        tensors = {name: t.cpu() for name, t in self.iter_full_tensors(self.export_dtype)}
        if _rank() != 0:
            return None
        for alias, name in distinct_tensors(self.inner.trainable_state())[1].items():
            tensors[alias] = tensors[name]
        return self.inner.weight_update(version, tensors)

    def stream_weights(self, target: WeightTarget, member: Membership) -> None:
        """Stream the trainable weights to a sampler's receivers (`engine.weight_stream`):
        every rank gathers one tensor at a time in `target`'s dtype, rank 0 (`member`: its
        place in the weight group) sends each in buckets as it comes; no rank holds a gathered
        copy. Every rank calls it."""
        dtype = target.torch_dtype
        tensors = self.iter_full_tensors(dtype, int(target.bucket_mb * 2**20))
        if _rank() != 0:
            for _ in tensors:  # the gathers rank 0 sends from
                pass
            return
        meta = meta_of(distinct_tensors(self.inner.trainable_state())[0], dtype)
        send_stream(target, meta, tensors, member)

    def save(self, path: Path, max_file_bytes: int = SAVE_FILE_BYTES) -> None:
        """The policy folder `HFTrainable.save` writes (a peft adapter, or a HF model in
        safetensors files of at most `max_file_bytes` with their index), written by rank 0
        while every rank gathers one tensor at a time, in the compute dtype; complete on every
        rank's return."""
        tensors = self.iter_full_tensors(self.export_dtype)
        if _rank() == 0:
            save_policy_folder(self.inner, Path(path), tensors, self.export_dtype, max_file_bytes)
        else:
            for _ in tensors:  # the gathers rank 0 writes from
                pass
        dist.barrier()  # the folder is complete when any rank returns

    def load_weights(self, path: Path) -> None:
        """A folder written by `save` (either learner's): rank 0 reads it, each rank keeps its
        shard."""
        load.load_policy_folder(self.inner, Path(path))


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
        full = {
            "state": {names[i]: s for i, s in state["state"].items()},
            "param_groups": [
                {**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]
            ],
        }
        set_optimizer_state_dict(
            self.model.inner.model, optimizer, full, options=StateDictOptions(full_state_dict=True)
        )

    def barrier(self) -> None:
        dist.barrier()


def sharded_trainable(
    policy: PolicyConfig, kl_reference: bool, replicate: int = 1, sequence: int = 1
) -> ShardedTrainable:
    """This rank's shard of the policy (and of its frozen reference when `kl_reference` and full
    fine-tuning) built without any rank holding the whole model (`practicum.learner.load`),
    then `policy.init` when set; over `replicate` copies (HSDP; 1: full sharding), in sequence
    groups of `sequence` ranks (`practicum.learner.sequence`; 1: none). Every rank calls it;
    the process group is joined."""
    device = load.rank_device(policy.device)
    # resolved here: the model is built on the meta device, which is no GPU
    policy = policy.model_copy(
        update={"gradient_checkpointing": uses_checkpointing(policy, device)}
    )
    path = resolve_model(policy.model)
    dtype = resolve_dtype(policy, device)
    check_attn_implementation(policy.attn_implementation, device)
    configure_threads()
    mp = load.mixed_precision(device, policy.lora)
    lm = load.empty_lm(path, dtype, policy.attn_implementation, policy.rope_scaling_dict)
    reference = None
    if kl_reference and not policy.lora:  # kept in the compute dtype: it is never updated
        reference = load.empty_lm(
            path, mp.param_dtype or dtype, policy.attn_implementation, policy.rope_scaling_dict
        )
        reference.eval().requires_grad_(False)
    make = (
        HFTrainable
        if sequence == 1
        else partial(SequenceParallelTrainable, groups=sequence_groups(device.type, sequence))
    )
    inner = make(
        policy.model_copy(update={"init": None}),
        lm,
        load_tokenizer(path),
        load.BuiltReference(reference),
    )
    inner.cfg = policy  # `init` is loaded below, sharded
    model = ShardedTrainable(
        inner,
        reference,
        mp,
        export_dtype=None if policy.lora else mp.param_dtype or dtype,
        mesh=learner_mesh(device.type, replicate),
    )
    load.materialise([r for r in (model.policy, model.reference) if r is not None], device)
    inner.device = model.device = device
    load.load_base_weights(path, [m for m in (lm, reference) if m is not None], policy.seed)
    if policy.init:
        model.load_weights(Path(policy.init))
    return model


def sharded_learner(cfg, policy: PolicyConfig) -> Learner:
    """This rank's `Learner` over its shard of the policy, on the plan's mesh
    (`placement.mesh`; the process group already joined); on CUDA each rank uses its
    LOCAL_RANK's GPU."""
    mesh = cfg.placement.learner_mesh
    model = sharded_trainable(
        policy, kl_reference=cfg.algo.kl_coef > 0, replicate=mesh.replicate, sequence=mesh.sequence
    )
    ranks = GroupRanks(model)
    if isinstance(model.inner, SequenceParallelTrainable):
        ranks = SequenceRanks(ranks, model.inner.groups, model.device)
    return Learner(model, cfg, ranks)
