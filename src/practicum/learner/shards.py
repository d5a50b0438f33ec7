"""Whole tensors moved between rank 0 and the FSDP2 shards of every rank, one tensor at a time.

FSDP2 (`fully_shard`, one flat mesh) shards each parameter on dim 0 in `torch.chunk` pieces:
rank r keeps rows [r c, (r + 1) c), c = ceil(rows / world), so the last ranks may hold fewer rows
or none. Rank 0 scatters a full tensor to those pieces (`scatter_rows`) and gathers them back
(`gather_rows`); the other ranks only ever hold their own piece. Pieces travel as bytes of one
size for every rank (the last ones padded), so any dtype crosses any backend (gloo included).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor, Shard


def _piece(param: DTensor) -> tuple[Tensor, int]:
    """This rank's local rows of `param` and the padded piece size (elements)."""
    if tuple(param.placements) != (Shard(0),):
        raise RuntimeError(f"expected a parameter sharded on dim 0 over one mesh dimension, "
                           f"got {param.placements}")
    world, rank = dist.get_world_size(), dist.get_rank()
    local = param.to_local()
    rows = param.shape[0] if param.dim() else 1
    chunk = math.ceil(rows / world) * (param.numel() // max(rows, 1))
    start = min(rank * chunk, param.numel())
    if local.numel() != min(chunk, param.numel() - start):
        raise RuntimeError(f"unexpected shard of {tuple(param.shape)} on rank {rank}: "
                           f"{tuple(local.shape)}")
    return local, chunk


def scatter_rows(param: DTensor, full: Tensor | None) -> None:
    """Every rank: its rows of `full` (rank 0's tensor; None elsewhere) into its shard of
    `param`, cast to the shard's dtype."""
    local, chunk = _piece(param)
    buf = torch.empty(chunk, dtype=local.dtype, device=local.device)
    pieces = None
    if full is not None:
        flat = full.to(device=local.device, dtype=local.dtype).reshape(-1)
        pieces = []
        for r in range(dist.get_world_size()):
            piece = flat[r * chunk:(r + 1) * chunk]
            if piece.numel() < chunk:
                piece = torch.cat([piece, piece.new_zeros(chunk - piece.numel())])
            pieces.append(piece.view(torch.uint8))
    dist.scatter(buf.view(torch.uint8), pieces, src=0)
    local.copy_(buf[:local.numel()].view(local.shape))


def gather_rows(param: DTensor, dtype: torch.dtype | None = None) -> Tensor | None:
    """Every rank: `param` whole on rank 0 (None elsewhere), on its device, in `dtype` (None:
    its own); a rank other than 0 holds just its padded piece meanwhile."""
    local, chunk = _piece(param)
    local = local.detach() if dtype is None else local.detach().to(dtype)
    buf = local.reshape(-1)
    if buf.numel() < chunk:
        buf = torch.cat([buf, buf.new_zeros(chunk - buf.numel())])
    if dist.get_rank() != 0:
        dist.gather(buf.view(torch.uint8), None, dst=0)
        return None
    flat = torch.empty(dist.get_world_size() * chunk, dtype=buf.dtype, device=buf.device)
    pieces = [flat[r * chunk:(r + 1) * chunk].view(torch.uint8)
              for r in range(dist.get_world_size())]
    dist.gather(buf.view(torch.uint8), pieces, dst=0)
    return flat[:param.numel()].view(param.shape)


def copy_rows(param: Tensor, full: Tensor) -> None:
    """This rank's rows of `full`, which every rank has, into its shard of `param` (the whole
    of `param` when it is not sharded)."""
    if not isinstance(param, DTensor):
        param.copy_(full)
        return
    local, chunk = _piece(param)
    start = min(dist.get_rank() * chunk, param.numel())
    flat = full.reshape(-1)[start:start + local.numel()]
    local.copy_(flat.view(local.shape).to(device=local.device, dtype=local.dtype))


def broadcast(tensor: Tensor, full: Tensor | None) -> None:
    """A tensor every rank keeps whole (a buffer): rank 0's value (`full`; None elsewhere)."""
    buf = (full.to(device=tensor.device, dtype=tensor.dtype).contiguous() if full is not None
           else torch.empty_like(tensor))
    dist.broadcast(buf.reshape(-1).view(torch.uint8), src=0)
    tensor.copy_(buf.view(tensor.shape))
