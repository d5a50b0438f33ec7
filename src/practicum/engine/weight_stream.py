"""Full weights streamed from a sharded learner to a sampler (`weight_sync: broadcast`): every
learner rank gathers one tensor at a time, in the sampler's dtype, and the learner's rank 0
sends it in buckets over a weight group (`weight_group`) to the sampler's receivers; no process
ever holds a gathered copy of the model (the anchors: SkyRL's `weight_sync`, per-module
`full_tensor()` cast to the inference dtype and a bucketed broadcast; prime-rl's per-layer bf16
broadcast; OpenRLHF's `_broadcast_to_vllm`).

    driver                                          learner ranks (Ray actors, or torchrun's)
      sampler.load_weights(update: StreamedUpdate)
        target = rendezvous.target(world, ...)      rank 0 + the sampler's receivers
        thread: update.send(target) ------------->  every rank: iter_full_tensors(dtype)
                                                    rank 0: send_stream(target, ...) (rank 0)
        receivers: Membership.of(target, rank)      vLLM's workers (1 + worker rank), an HF
                   .receive_stream()                copy here or in engine actors (1, 2, ...)

The receiving side owns the rendezvous: a TCPStore server where the sampler's driver runs.
Each formation of the group (the first publish, a member replaced, a publish that failed) gets
a prefix of its own, and every member keeps its membership between publishes while the target
stays the same (`Membership`). The backend is the receivers': nccl when they hold the weights
on GPUs (the sender's buckets then live on its current GPU), gloo otherwise.

Memory: rank 0 holds the tensor being gathered (whole, in the sampler's dtype) and one bucket
(`bucket_mb`; a larger tensor travels as itself); the other ranks their shards and the pieces
they send; each receiver one bucket, copied into its model as it arrives.

A target says how its streams travel: `transport` collective (the bytes through the group) or
ipc (each bucket shared in place with receivers on the sender's machine, `weight_ipc`), and
`verify` (each tensor's fingerprint follows the weights; the receivers check what they compute
with, `weight_check`). A receiver that fails while alive takes the rest of the stream
(`drained`), so the sender ends with the error instead of waiting for the group's timeout; one
that dies breaks the group's connections, which the sender sees at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from practicum.engine.weight_group import Meta, WeightGroup, abort_formation


@dataclass(frozen=True)
class WeightTarget:
    """One formation of a weight group: where its members meet and what travels."""

    host: str
    """The rendezvous store's address (where the receiving side runs)."""
    port: int
    prefix: str
    """This formation's keys in the store (a new one per formation)."""
    world: int
    """Members: the sender (rank 0) and the receivers (1 .. world - 1)."""
    backend: str
    dtype: str
    """The receivers' dtype: floating tensors are cast to it before they travel."""
    bucket_mb: float
    timeout_s: float = 600.0
    verify: bool = False
    """The sender follows the weights with their fingerprints (`engine.verify_weights`: the
    receivers then check what they hold, `weight_check`)."""
    transport: str = "collective"
    """collective: the bytes go through the group; ipc: they are shared in place with the
    receivers on the sender's machine, control messages only through the group
    (`weight_ipc`)."""

    def join(self, rank: int, bind: str | None = None) -> WeightGroup:
        return WeightGroup.join(
            self.host, self.port, rank, self.world, self.backend, self.timeout_s, self.prefix, bind
        )

    def abort(self, reason: str) -> None:
        """Members still waiting for this formation to form stop with `reason`."""
        abort_formation(self.host, self.port, self.prefix, reason)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


class WeightRendezvous:
    """The receiving side's store (a TCPStore server in this process, on a free port) and the
    targets formed on it."""

    def __init__(self, host: str = "127.0.0.1", timeout_s: float = 600.0):
        self.host, self.timeout_s, self.formed = host, timeout_s, 0
        self.store = dist.TCPStore(
            host, 0, None, True, timedelta(seconds=timeout_s), wait_for_workers=False
        )

    def target(
        self,
        world: int,
        backend: str,
        dtype: torch.dtype | str,
        bucket_mb: float,
        verify: bool = False,
        transport: str = "collective",
    ) -> WeightTarget:
        """A new formation of `world` members."""
        self.formed += 1
        return WeightTarget(
            self.host,
            self.store.port,
            f"practicum-weights-{self.formed}",
            world,
            backend,
            str(dtype).removeprefix("torch."),
            bucket_mb,
            self.timeout_s,
            verify,
            transport,
        )


class Membership:
    """One member's place in the current formation: joined at the first publish to a target,
    kept while the target stays, re-joined when it changes."""

    def __init__(self, bind: str | None = None):
        self.bind = bind
        """The address this member's gloo sockets listen on (its own node's); None: the
        target's host."""
        self.target: WeightTarget | None = None
        self.group: WeightGroup | None = None

    def of(self, target: WeightTarget, rank: int) -> WeightGroup:
        if self.target != target or self.group is None:
            self.close()
            self.group = target.join(rank, self.bind)
            self.target = target
        return self.group

    def close(self) -> None:
        group, self.group, self.target = self.group, None, None
        if group is not None:
            group.close()


@dataclass(frozen=True)
class StreamFormat:
    """What a receiving sampler takes of a weight group, told by the sampler itself (in an
    engine actor: on the actor's node and devices, not the driver's)."""

    receivers: int
    """Members it joins as (vLLM: one per tensor-parallel worker)."""
    backend: str
    """nccl when it holds the weights on GPUs, else gloo."""
    dtype: str
    """The dtype it computes in (floating tensors are cast to it before they travel)."""


@dataclass
class StreamedUpdate:
    """A full-weight version that is streamed, not handed over: the sampler forms a target for
    its receivers and calls `send(target)` beside them (`publish`)."""

    version: int
    send: Callable[[WeightTarget], None]
    """Makes every learner rank stream the current weights to `target` (blocks until sent)."""
    kind: str = "full"


def own_address() -> str | None:
    """This node's address when this process belongs to a Ray cluster (a weight group's
    members then listen on their own node's address), else None (one machine: loopback)."""
    import sys

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    return None


def send_stream(
    target: WeightTarget,
    meta: Meta,
    tensors: Iterator[tuple[str, torch.Tensor]],
    member: Membership,
) -> None:
    """The sender (rank 0): stream `tensors` (described by `meta`) to `target`. On a failure
    the rest of `tensors` is still drawn (each is a collective of the learner's ranks, which
    must stay paired) and the membership dropped (the next publish forms anew)."""
    try:
        member.of(target, 0).send_stream(
            meta, tensors, target.bucket_mb, target.verify, ipc=target.transport == "ipc"
        )
    except BaseException:
        member.close()
        try:
            for _ in tensors:
                pass
        except Exception:  # noqa: BLE001 - the first failure is the one to report
            pass
        raise


def receive_into(
    state: dict[str, torch.Tensor], arriving: Iterator[tuple[str, torch.Tensor]]
) -> set[str]:
    """Copy each arriving tensor into `state`'s tensor of that name (in place, as it arrives);
    the names received. An unknown name or shape raises, after the rest has arrived."""
    got, problems = set(), []
    with torch.no_grad(), drained(arriving):
        for name, tensor in arriving:
            mine = state.get(name)
            if mine is None or mine.shape != tensor.shape:
                problems.append(name)
                continue
            mine.copy_(tensor)
            got.add(name)
    if problems:
        raise ValueError(f"weights streamed that this sampler has no place for: {problems[:5]}")
    return got


@contextmanager
def drained(arriving: Iterator):
    """Whatever the body raises, the rest of `arriving` is taken before it propagates: the
    sender sends every bucket and would otherwise wait for the group's timeout (a receiver
    that fails while staying alive; one that dies breaks the group's connections at once)."""
    try:
        yield arriving
    except BaseException:
        try:
            for _ in arriving:
                pass
        except Exception:  # noqa: BLE001 - the body's failure is the one to report
            pass
        raise


def publish(update: StreamedUpdate, target: WeightTarget, receive: Callable[[], None]) -> None:
    """Both sides of one streamed version: `update.send(target)` in a thread beside
    `receive()` here. A receiver that fails is reported at once (a sender still waiting for
    the group to form is told to stop); else the sender's failure, once both have ended."""
    with ThreadPoolExecutor(1, thread_name_prefix="weight-stream") as pool:
        sending = pool.submit(update.send, target)
        try:
            receive()
        except BaseException as err:
            # a receiver that failed before the group formed: the sender stops now, not at the
            # group's timeout; the receiver's failure is the one to report
            target.abort(f"a receiver failed: {type(err).__name__}: {err}"[:2000])
            try:
                sending.result()
            except BaseException:  # noqa: BLE001 - a consequence of the receiver's failure
                pass
            raise
        sending.result()
