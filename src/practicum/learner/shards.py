"""Whole tensors moved between rank 0 and the FSDP2 shards of every rank, one tensor at a time.

FSDP2 (`fully_shard`) shards each parameter on dim 0 in `torch.chunk` pieces over the mesh's
shard dimension: the rank at shard coordinate j keeps rows [j c, (j + 1) c), c = ceil(rows /
shards), so the last pieces may hold fewer rows or none. With full sharding (placements
`(Shard(0),)`) every rank holds a piece of the one copy; with hybrid sharding (HSDP, placements
`(Replicate(), Shard(0))` on a replicate x shard mesh) each copy's ranks hold its pieces and the
copies are equal. Rank 0 (in copy 0) scatters a full tensor to copy 0's pieces, and each piece
is broadcast to the same piece of the other copies (`scatter_rows`); gathering a tensor back
(`gather_rows`) reads copy 0 only. The other ranks only ever hold their own piece. Pieces
travel as bytes of one size for every rank (the last ones padded), so any dtype crosses any
backend (gloo included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor, Replicate, Shard


@dataclass
class _Piece:
    """Where this rank's piece of a sharded parameter sits in the mesh."""

    local: Tensor
    """This rank's rows."""
    chunk: int
    """The padded piece size (elements)."""
    index: int
    """This rank's piece (its coordinate on the shard dimension)."""
    pieces: int
    shards: dist.ProcessGroup
    """The ranks holding this copy's pieces (group rank = piece)."""
    copies: dist.ProcessGroup | None
    """HSDP: the ranks holding this piece in every copy (group rank = copy); else None."""
    in_first_copy: bool
    """This rank belongs to copy 0, the one rank 0 is in."""


def _piece(param: DTensor) -> _Piece:
    mesh, placements = param.device_mesh, tuple(param.placements)
    if placements == (Shard(0),):
        shard_dim, copies, in_first = 0, None, True
    elif placements == (Replicate(), Shard(0)):
        shard_dim, copies, in_first = 1, mesh.get_group(0), mesh.get_local_rank(0) == 0
    else:
        raise RuntimeError(
            f"expected a parameter sharded on dim 0 over a full or hybrid "
            f"(replicate x shard) mesh, got {placements}"
        )
    pieces, index = mesh.size(shard_dim), mesh.get_local_rank(shard_dim)
    local = param.to_local()
    rows = param.shape[0] if param.dim() else 1
    chunk = math.ceil(rows / pieces) * (param.numel() // max(rows, 1))
    start = min(index * chunk, param.numel())
    if local.numel() != min(chunk, param.numel() - start):
        raise RuntimeError(
            f"unexpected shard of {tuple(param.shape)} on rank "
            f"{dist.get_rank()}: {tuple(local.shape)}"
        )
    return _Piece(local, chunk, index, pieces, mesh.get_group(shard_dim), copies, in_first)


def scatter_rows(param: DTensor, full: Tensor | None) -> None:
    """Every rank: its rows of `full` (rank 0's tensor; None elsewhere) into its shard of
    `param`, cast to the shard's dtype."""
    p = _piece(param)
    buf = torch.empty(p.chunk, dtype=p.local.dtype, device=p.local.device)
    if p.in_first_copy:
        pieces = None
        if full is not None:
            flat = full.to(device=p.local.device, dtype=p.local.dtype).reshape(-1)
            pieces = []
            for r in range(p.pieces):
                piece = flat[r * p.chunk : (r + 1) * p.chunk]
                if piece.numel() < p.chunk:
                    piece = torch.cat([piece, piece.new_zeros(p.chunk - piece.numel())])
                pieces.append(piece.view(torch.uint8))
        dist.scatter(buf.view(torch.uint8), pieces, group=p.shards, group_src=0)
    if p.copies is not None:  # copy 0's piece to the same piece of every other copy
        dist.broadcast(buf.view(torch.uint8), group=p.copies, group_src=0)
    p.local.copy_(buf[: p.local.numel()].view(p.local.shape))


def gather_rows(
    param: DTensor, dtype: torch.dtype | None = None, max_bytes: int | None = None
) -> Tensor | None:
    """Every rank: `param` whole on rank 0 (None elsewhere), on its device, in `dtype` (None:
    its own), gathered from copy 0's ranks (each holds just its padded piece meanwhile); the
    other copies' ranks send nothing. `max_bytes` (the same on every rank): gathered in slices
    of the pieces of at most that many bytes in all, since gloo stages a gather's whole output
    in a buffer of its own before copying it out (None: one gather)."""
    p = _piece(param)
    if not p.in_first_copy:
        return None
    local = p.local.detach() if dtype is None else p.local.detach().to(dtype)
    buf = local.reshape(-1)
    if buf.numel() < p.chunk:
        buf = torch.cat([buf, buf.new_zeros(p.chunk - buf.numel())])
    step = (
        p.chunk
        if max_bytes is None
        else max(1, min(p.chunk, max_bytes // (p.pieces * buf.element_size())))
    )
    flat = (
        None
        if p.index != 0
        else torch.empty(p.pieces * p.chunk, dtype=buf.dtype, device=buf.device)
    )
    for start in range(0, p.chunk, step):
        stop = min(start + step, p.chunk)
        pieces = (
            None
            if flat is None
            else [
                flat[r * p.chunk + start : r * p.chunk + stop].view(torch.uint8)
                for r in range(p.pieces)
            ]
        )
        dist.gather(buf[start:stop].view(torch.uint8), pieces, group=p.shards, group_dst=0)
    return None if flat is None else flat[: param.numel()].view(param.shape)


def copy_rows(param: Tensor, full: Tensor) -> None:
    """This rank's rows of `full`, which every rank has, into its shard of `param` (the whole
    of `param` when it is not sharded)."""
    if not isinstance(param, DTensor):
        param.copy_(full)
        return
    p = _piece(param)
    start = min(p.index * p.chunk, param.numel())
    flat = full.reshape(-1)[start : start + p.local.numel()]
    p.local.copy_(flat.view(p.local.shape).to(device=p.local.device, dtype=p.local.dtype))


def broadcast(tensor: Tensor, full: Tensor | None) -> None:
    """A tensor every rank keeps whole (a buffer): rank 0's value (`full`; None elsewhere)."""
    buf = (
        full.to(device=tensor.device, dtype=tensor.dtype).contiguous()
        if full is not None
        else torch.empty_like(tensor)
    )
    dist.broadcast(buf.reshape(-1).view(torch.uint8), src=0)
    tensor.copy_(buf.view(tensor.shape))
