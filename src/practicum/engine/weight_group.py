"""A process group of its own for publishing full weights by broadcast (`weight_sync:
broadcast`): rank 0 holds the new weights (the process that publishes them), ranks 1..n receive
them (vLLM's workers, one per tensor-parallel shard), as verl, prime-rl and SkyRL do.

    pending = WeightGroup.open_server(world, backend)    # rank 0: a store on a free port
    group = WeightGroup.join(host, pending.port, rank, world, backend)   # each receiver ...
    group = pending.connect()                            # ... while rank 0 connects
    group.send(tensors, meta)                            # rank 0, `meta = meta_of(tensors)`
    for name, t in group.receive(meta, device): ...      # each receiver, one bucket at a time

The group rendezvous on its own `TCPStore` and is built from the backend class directly
(`ProcessGroupGloo` / `ProcessGroupNCCL`), never through `init_process_group`, so it neither
needs nor disturbs a default process group (the sharded learner may hold one) and its ranks are
its own. Backend: nccl when the weights are CUDA tensors (they go GPU to GPU), gloo otherwise.
NCCL cannot join two processes on one GPU: a learner on one of vLLM's GPUs is refused (the
config check, and the vLLM sampler when the group forms). `host` is the address the group is
reached at: the receivers dial the store there (its server listens on every interface) and a
gloo group's sockets bind to it; 127.0.0.1 by default, since the receivers run on rank 0's node
(vLLM's workers are its engine's processes on one node).

Tensors travel in buckets: consecutive tensors of one dtype flattened into one buffer of up to
`bucket_mb` (a larger tensor alone), so a model of hundreds of tensors takes a few collectives;
both sides derive the same buckets from the metadata (`buckets`). `send_stream` sends the
metadata and the bucket size first and takes the tensors from an iterator as they come (a
sharded learner's gathers: `weight_stream`), so the receivers need nothing beforehand
(`receive_stream`) and the sender holds one bucket.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from practicum.engine.weight_ipc import SharedBucket, cuda_handle, open_shared

Meta = list[tuple[str, tuple[int, ...], str]]
"""(name, shape, dtype name) of every tensor sent, in sending order."""

BUCKET_MB = 32
"""Default bucket size: big enough that a collective's fixed cost is small beside its bytes,
small enough that the sender's copy into a bucket stays in cache and a receiver holds little
beside the model (over gloo on a CPU, 32 MiB buckets were quicker than 256 MiB ones; not yet
measured over NCCL)."""


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def meta_of(tensors: dict[str, torch.Tensor], dtype: torch.dtype | None = None) -> Meta:
    """What the receivers allocate for `tensors`: each in its own dtype, or (floating ones)
    cast to `dtype` on the way (`WeightGroup.send` casts a bucket at a time)."""
    return [
        (
            k,
            tuple(v.shape),
            str(dtype if dtype is not None and v.is_floating_point() else v.dtype).removeprefix(
                "torch."
            ),
        )
        for k, v in tensors.items()
    ]


def buckets(meta: Meta, bucket_mb: float = BUCKET_MB) -> list[list[int]]:
    """Indices into `meta` grouped into buckets: consecutive, one dtype each, at most
    `bucket_mb` MiB unless a single tensor is larger (then it travels alone)."""
    limit = bucket_mb * 2**20
    out: list[list[int]] = []
    size, dtype = 0, None
    for i, (_, shape, name) in enumerate(meta):
        nbytes = _numel(shape) * getattr(torch, name).itemsize
        if not out or name != dtype or size + nbytes > limit:
            out.append([])
            size, dtype = 0, name
        out[-1].append(i)
        size += nbytes
    return out


def _nbytes(meta: Meta, idx: list[int]) -> int:
    return sum(_numel(meta[i][1]) * getattr(torch, meta[i][2]).itemsize for i in idx)


def _oversized(meta: Meta, idx: list[int], bucket_mb: float) -> bool:
    """A bucket that is one tensor larger than a bucket: the ipc transport sends it as itself
    (its own CUDA IPC handle, or through the group from the CPU), never through a buffer as
    large, so the sender holds at most that tensor and one bucket."""
    return len(idx) == 1 and _nbytes(meta, idx) > bucket_mb * 2**20


def _shared_capacity(meta: Meta, bucket_mb: float) -> int:
    """Bytes of the ipc buffer: the largest bucket that goes through it."""
    return max(
        (
            _nbytes(meta, idx)
            for idx in buckets(meta, bucket_mb)
            if not _oversized(meta, idx, bucket_mb)
        ),
        default=0,
    )


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class FormationAborted(RuntimeError):
    """Another member gave up before the group formed (`abort_formation`)."""


def check_in(store: dist.Store, rank: int, world: int, timeout_s: float) -> None:
    """Wait until every member has checked in to this formation, or one aborted it.

    The backend's own rendezvous can only wait out its timeout, so a member that fails before
    joining (a vLLM worker that cannot start) would hold the others for the whole of it; a
    member that fails sets `aborted` instead, and the others stop at once with its reason."""
    store.set(f"arrived/{rank}", b"1")
    everyone = [f"arrived/{r}" for r in range(world)]
    deadline = time.monotonic() + timeout_s
    while not store.check(everyone):
        if store.check(["aborted"]):
            raise FormationAborted(store.get("aborted").decode(errors="replace"))
        if time.monotonic() > deadline:
            missing = [k for k in everyone if not store.check([k])]
            raise TimeoutError(
                f"weight group: {missing} did not join (timed out after {timeout_s:.0f} s)"
            )
        time.sleep(0.05)


def abort_formation(host: str, port: int, prefix: str, reason: str) -> None:
    """Tell the members of formation `prefix` still waiting in `check_in` to give up."""
    try:
        store = dist.TCPStore(host, port, None, False, timedelta(seconds=10))
        dist.PrefixStore(prefix, store).set("aborted", reason.encode())
    except (RuntimeError, OSError):  # the store is gone: nobody is left waiting on it
        pass


@dataclass
class WeightGroup:
    """One member of the weight group (module doc)."""

    pg: Any
    """The backend's group (ProcessGroupGloo or ProcessGroupNCCL)."""
    rank: int
    world: int
    backend: str
    store: dist.Store
    sent_fingerprints: dict[str, int] | None = None
    """A receiver's: the fingerprints that followed the last stream (`receive_stream`)."""

    @classmethod
    def open_server(
        cls,
        world: int,
        backend: str,
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_s: float = 600.0,
    ) -> PendingGroup:
        """Rank 0's store, listening now (port 0: a free one, `.port`); `.connect()` then forms
        the group, which blocks until all `world` members have joined."""
        store = dist.TCPStore(
            host, port, None, True, timedelta(seconds=timeout_s), wait_for_workers=False
        )
        return PendingGroup(store, host, world, backend, timeout_s)

    @classmethod
    def join(
        cls,
        host: str,
        port: int,
        rank: int,
        world: int,
        backend: str,
        timeout_s: float = 600.0,
        prefix: str = "practicum-weights",
        bind: str | None = None,
    ) -> WeightGroup:
        """A member's membership (blocks until every member has joined); `prefix` names this
        formation among those of one store (`weight_stream.WeightRendezvous`); `bind`: the
        address this member's gloo sockets listen on (its own node's; default `host`)."""
        store = dist.TCPStore(host, port, None, False, timedelta(seconds=timeout_s))
        return cls._form(store, bind or host, rank, world, backend, timeout_s, prefix)

    @classmethod
    def _form(
        cls,
        store: dist.Store,
        host: str,
        rank: int,
        world: int,
        backend: str,
        timeout_s: float,
        prefix: str = "practicum-weights",
    ) -> WeightGroup:
        prefixed = dist.PrefixStore(prefix, store)
        timeout = timedelta(seconds=timeout_s)
        check_in(prefixed, rank, world, timeout_s)
        if backend == "gloo":  # its sockets on `host`, not on what the host name resolves to
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
            pg = dist.ProcessGroupGloo(prefixed, rank, world, options)
        elif backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            pg = dist.ProcessGroupNCCL(prefixed, rank, world, options)
        else:
            raise ValueError(f"weight group backend {backend!r}: nccl or gloo")
        return cls(pg, rank, world, backend, store)

    def send(
        self, tensors: Sequence[torch.Tensor], meta: Meta, bucket_mb: float = BUCKET_MB
    ) -> None:
        """Rank 0: broadcast `tensors` (described by `meta`, in its order, each cast to its
        dtype there) to every receiver."""
        self._send_buckets(zip((name for name, _, _ in meta), tensors), meta, bucket_mb)

    def send_stream(
        self,
        meta: Meta,
        tensors: Iterable[tuple[str, torch.Tensor]],
        bucket_mb: float = BUCKET_MB,
        verify: bool = False,
        ipc: bool = False,
    ) -> None:
        """Rank 0: `meta` and the bucket size first (so the receivers need neither:
        `receive_stream`), then `tensors` as they come, named and ordered as `meta` says.
        Holds one bucket (a larger tensor travels as itself) beside the tensor being copied
        in, so a gathered model streams through a few hundred MB. `verify`: the fingerprint
        of every tensor as it travels (`weight_check.fingerprint`, taken from the bucket, so
        in the receivers' dtype) follows the last bucket, for the post-sync check. `ipc`:
        the buckets are shared in place with receivers on this machine (`weight_ipc`: CUDA
        IPC from a GPU, shared memory from the CPU) and only control messages travel."""
        arriving = iter(tensors)
        shared = None
        if ipc:  # the buffer lives where the weights are: the first tensor says where
            first = next(arriving, None)
            device = first[1].device if first is not None else torch.device("cpu")
            arriving = itertools.chain([first] if first is not None else [], arriving)
            shared = SharedBucket.create(_shared_capacity(meta, bucket_mb), device)
        try:
            self._send_bytes(
                json.dumps(
                    {"meta": meta, "bucket_mb": bucket_mb, "verify": verify, "ipc": ipc}
                ).encode()
            )
            if shared is not None:
                self._send_bytes(json.dumps(shared.handle).encode())
                opened = self._all_ok(True)
                shared.forget()
                if not opened:
                    raise RuntimeError(
                        "weight transport ipc: a receiver could not open the "
                        "shared buffer (its own error says why)"
                    )
            sent: dict[str, int] | None = {} if verify else None
            self._send_buckets(arriving, meta, bucket_mb, sent, shared)
            if sent is not None:
                self._send_bytes(json.dumps(sent).encode())
        finally:
            if shared is not None:
                shared.forget()

    def _send_bytes(self, data: bytes) -> None:
        self._broadcast(torch.tensor([len(data)], dtype=torch.int64))
        self._broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8))

    def _receive_bytes(self) -> bytes:
        size = torch.empty(1, dtype=torch.int64)
        self._broadcast(size)
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        self._broadcast(data)
        return data.numpy().tobytes()

    def _barrier(self) -> None:
        """Every member has come this far (a one-element all-reduce: also over nccl)."""
        self._all_ok(True)

    def _all_ok(self, ok: bool) -> bool:
        """Whether every member says ok (each says its own; all hear the verdict)."""
        flag = torch.tensor([0.0 if ok else 1.0], device=self.device)
        self.pg.allreduce([flag]).wait()
        return flag.item() == 0.0

    def _send_buckets(
        self,
        tensors: Iterable[tuple[str, torch.Tensor]],
        meta: Meta,
        bucket_mb: float,
        fingerprints: dict[str, int] | None = None,
        shared: SharedBucket | None = None,
    ) -> None:
        """`fingerprints`: filled with each tensor's fingerprint as it travels, if given.
        `shared`: every bucket is filled into it (each tensor cast on the way), then the
        receivers are told it is ready and copy it out before the next is filled; a tensor
        larger than a bucket goes as itself (`_oversized`)."""
        from practicum.engine.weight_check import fingerprint

        if self.rank != 0:
            raise RuntimeError("only rank 0 sends weights")
        arriving = iter(tensors)
        for idx in buckets(meta, bucket_mb):
            dtype = getattr(torch, meta[idx[0]][2])
            sizes = [_numel(meta[i][1]) for i in idx]
            through_buffer = shared is not None and not _oversized(meta, idx, bucket_mb)
            if through_buffer:
                flat = shared.view(dtype, sum(sizes))
            else:
                flat = (
                    None
                    if len(idx) == 1
                    else torch.empty(sum(sizes), dtype=dtype, device=self.device)
                )
            for i, part in zip(idx, flat.split(sizes) if flat is not None else [None]):
                name, tensor = next(arriving, (None, None))
                if name != meta[i][0]:
                    raise RuntimeError(
                        f"weight stream: got {name!r} where the metadata has {meta[i][0]!r}"
                    )
                if part is None:  # alone in its bucket: sent as itself, cast if need be
                    # (ipc from a GPU: shared where it lies; otherwise on the group's device)
                    where = tensor.device if shared is not None and tensor.is_cuda else self.device
                    flat = tensor.detach().contiguous().reshape(-1).to(where, dtype)
                    part = flat
                else:
                    part.copy_(tensor.detach().reshape(-1))
                if fingerprints is not None:
                    fingerprints[name] = fingerprint(part)
                del tensor
            if flat.is_cuda and shared is not None:  # read from other CUDA contexts
                torch.cuda.current_stream(flat.device).synchronize()
            if through_buffer:
                self._barrier()  # ready
                self._barrier()  # taken
            elif flat.is_cuda and shared is not None:  # its own handle, opened in place
                self._send_bytes(json.dumps(cuda_handle(flat)).encode())
                self._barrier()  # taken
            else:
                self.pg.broadcast(flat, 0).wait()
            del flat

    def receive_stream(
        self, device: torch.device | str = "cpu"
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """A receiver's side of `send_stream`: the tensors as they arrive (as `receive`).
        Once it is consumed, `sent_fingerprints` holds the sender's fingerprints when it
        sent them (`verify`), else None."""
        self.sent_fingerprints = None
        header = json.loads(self._receive_bytes())
        meta = [(n, tuple(s), d) for n, s, d in header["meta"]]
        if header.get("ipc"):
            handle = json.loads(self._receive_bytes())
            try:
                buffer = open_shared(handle)
            except BaseException:
                self._all_ok(False)  # the sender and the others stop here, not at a timeout
                raise
            if not self._all_ok(True):
                raise RuntimeError(
                    "weight transport ipc: another receiver could not open the shared buffer"
                )
            yield from self._receive_shared(meta, buffer, header["bucket_mb"], "cuda" in handle)
        else:
            yield from self.receive(meta, device, header["bucket_mb"])
        if header.get("verify"):
            self.sent_fingerprints = json.loads(self._receive_bytes())

    def _receive_shared(
        self, meta: Meta, buffer: torch.Tensor, bucket_mb: float, cuda: bool
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The ipc side of `receive`: each bucket viewed in the sender's buffer, where it lies
        (its GPU, or shared CPU memory), until the sender is told it was taken; a tensor
        larger than a bucket opened by its own handle (`cuda`) or received through the group
        (from a CPU sender)."""
        for idx in buckets(meta, bucket_mb):
            dtype = getattr(torch, meta[idx[0]][2])
            sizes = [_numel(meta[i][1]) for i in idx]
            oversized = _oversized(meta, idx, bucket_mb)
            if oversized and not cuda:
                flat = torch.empty(sum(sizes), dtype=dtype)
                self.pg.broadcast(flat, 0).wait()
                yield meta[idx[0]][0], flat.view(meta[idx[0]][1])
                continue
            if oversized:
                flat = open_shared(json.loads(self._receive_bytes()))
            else:
                self._barrier()  # ready
                flat = buffer[: sum(sizes) * dtype.itemsize].view(dtype)
            for i, part in zip(idx, flat.split(sizes)):
                yield meta[i][0], part.view(meta[i][1])
            if flat.is_cuda:
                torch.cuda.current_stream(flat.device).synchronize()
            del flat
            self._barrier()  # taken

    def _broadcast(self, small: torch.Tensor) -> None:
        """A small CPU tensor from rank 0 (through the group's device for nccl)."""
        buf = small.to(self.device)
        self.pg.broadcast(buf, 0).wait()
        small.copy_(buf)

    @property
    def device(self) -> torch.device:
        """Where this member's buffers live: its current GPU for nccl, else the CPU."""
        return (
            torch.device("cuda", torch.cuda.current_device())
            if self.backend == "nccl"
            else torch.device("cpu")
        )

    def receive(
        self, meta: Meta, device: torch.device | str = "cpu", bucket_mb: float = BUCKET_MB
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """A receiver: the broadcast tensors as (name, tensor), one bucket at a time (views of
        the bucket's buffer: copy what must outlive the next bucket). Consume it to the end, or
        the sender waits for the buckets not taken until its timeout."""
        for idx in buckets(meta, bucket_mb):
            dtype = getattr(torch, meta[idx[0]][2])
            sizes = [_numel(meta[i][1]) for i in idx]
            flat = torch.empty(sum(sizes), dtype=dtype, device=device)
            self.pg.broadcast(flat, 0).wait()
            for i, part in zip(idx, flat.split(sizes)):
                yield meta[i][0], part.view(meta[i][1])

    def close(self) -> None:
        self.pg.shutdown()


@dataclass
class PendingGroup:
    """Rank 0 between opening its store and forming the group (`WeightGroup.open_server`)."""

    store: dist.TCPStore
    host: str
    world: int
    backend: str
    timeout_s: float

    @property
    def port(self) -> int:
        return self.store.port

    def connect(self) -> WeightGroup:
        return WeightGroup._form(self.store, self.host, 0, self.world, self.backend, self.timeout_s)
