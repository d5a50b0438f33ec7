"""A KV cache for the sampling loop that writes into reserved space instead of concatenating.

transformers' `DynamicLayer` appends each decode step's keys and values with `torch.cat`, which
copies every cached token of every layer on every step. `ReservedLayer` keeps a buffer with
room for the whole generation and writes the new step into it, handing attention a view of the
filled part; finished rows still leave the batch through `batch_select_indices`.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """A `DynamicLayer` whose storage is reserved for `capacity` positions up front (it grows
    by doubling if a call writes past that)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            self._keys = self._reserve(key_states, max(self.capacity, key_states.shape[-2]))
            self._values = self._reserve(value_states, self._keys.shape[-2])
            self.is_initialized = True
        end = self.length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            self._keys = self._grown(self._keys, 2 * end)
            self._values = self._grown(self._values, 2 * end)
        self._keys[..., self.length : end, :] = key_states
        self._values[..., self.length : end, :] = value_states
        self.length = end
        self.keys, self.values = self._keys[..., :end, :], self._values[..., :end, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys = self._keys[..., : self.length, :]
            self.values = self._values[..., : self.length, :]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self._keys = self._keys.repeat_interleave(repeats, dim=0)
            self._values = self._values.repeat_interleave(repeats, dim=0)
            self.keys = self._keys[..., : self.length, :]
            self.values = self._values[..., : self.length, :]

    def reset(self) -> None:
        super().reset()
        self.length = 0

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("ReservedLayer is a sampling-loop cache; it does not crop")

    @staticmethod
    def _reserve(like: torch.Tensor, positions: int) -> torch.Tensor:
        return like.new_empty((*like.shape[:-2], positions, like.shape[-1]))

    def _grown(self, buf: torch.Tensor, positions: int) -> torch.Tensor:
        bigger = self._reserve(buf, positions)
        bigger[..., : self.length, :] = buf[..., : self.length, :]
        return bigger


def reserved_cache(config, capacity: int) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers are `ReservedLayer`s with room
    for `capacity` positions (sliding-window and other special layers are kept as they are)."""
    cache = DynamicCache(config=config)
    cache.layers = [
        ReservedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache


def join_rows(a: DynamicCache | None, b: DynamicCache, capacity: int) -> DynamicCache:
    """One cache holding `a`'s rows, then `b`'s, with room for `capacity` positions: each side is
    right-aligned at the longer one's length, and the positions added on the left of the shorter
    side hold zeros (left padding, which the rows' attention masks hide). Both caches must be
    `reserved_cache`s of full-attention layers (`all_reserved`)."""
    if a is None:
        return b
    out = DynamicCache()
    out.layers = []
    for la, lb in zip(a.layers, b.layers):
        width = max(la.length, lb.length)
        layer = ReservedLayer(max(capacity, width))
        layer.dtype, layer.device, layer.is_initialized = la.dtype, la.device, True
        bufs = []
        for xa, xb in ((la._keys, lb._keys), (la._values, lb._values)):
            rows_a, rows_b = xa.shape[0], xb.shape[0]
            buf = xa.new_zeros((rows_a + rows_b, *xa.shape[1:-2], layer.capacity, xa.shape[-1]))
            buf[:rows_a, ..., width - la.length : width, :] = xa[..., : la.length, :]
            buf[rows_a:, ..., width - lb.length : width, :] = xb[..., : lb.length, :]
            bufs.append(buf)
        layer._keys, layer._values = bufs
        layer.length = width
        layer.keys, layer.values = layer._keys[..., :width, :], layer._values[..., :width, :]
        out.layers.append(layer)
    return out


def keep_rows(cache: DynamicCache, rows: torch.Tensor, drop_left: int = 0) -> None:
    """Keep only `rows` (indices) of every layer and drop its first `drop_left` positions
    (padding no remaining row attends to)."""
    for layer in cache.layers:
        layer._keys = layer._keys[rows][..., drop_left:, :]
        layer._values = layer._values[rows][..., drop_left:, :]
        layer.length -= drop_left
        layer.keys = layer._keys[..., : layer.length, :]
        layer.values = layer._values[..., : layer.length, :]


def all_reserved(cache: DynamicCache) -> bool:
    """Whether every layer is a `ReservedLayer` (no sliding-window or other special layers)."""
    return all(isinstance(layer, ReservedLayer) for layer in cache.layers)
