"""A stand-in accelerator for CPU-only tests: code that forgets to move a tensor fails here as it
would on a GPU.

Inside `on_fake_device()`, a tensor created on or moved to the `meta` device becomes a
`FakeDeviceTensor`: it reports device `meta` but holds real CPU data, so values, `.item()`,
autograd and optimizers work. Any op that mixes one with a CPU tensor of one or more dimensions
raises, as CUDA does ("Expected all tensors to be on the same device"); CPU scalars (0-dim) may
mix, as they may on CUDA, and `copy_` / `.to(...)` may cross devices.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

DEVICE = torch.device("meta")
"""The device the fake accelerator's tensors report."""

aten = torch.ops.aten
CROSS_DEVICE = {aten._to_copy.default, aten.copy_.default}
"""Ops that may read one device and write another."""


class FakeDeviceTensor(torch.Tensor):
    """A tensor on the fake accelerator: real CPU data (`inner`) behind a `meta` device."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            device=DEVICE,
            requires_grad=inner.requires_grad,
        )
        out.inner = inner
        return out

    def __repr__(self) -> str:
        return f"FakeDeviceTensor({self.inner!r})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})


def _is_fake_device(device) -> bool:
    return device is not None and torch.device(device).type == DEVICE.type


def _run(func, args, kwargs):
    tensors = [a for a in _flat(args, kwargs) if isinstance(a, torch.Tensor)]
    on_fake = any(isinstance(t, FakeDeviceTensor) for t in tensors)
    if on_fake and func not in CROSS_DEVICE:
        for t in tensors:
            if not isinstance(t, FakeDeviceTensor) and t.dim() > 0:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two "
                    f"devices, {DEVICE} (fake accelerator) and {t.device}! ({func})"
                )
    to_fake = _is_fake_device(kwargs.get("device"))
    leaving = func is aten._to_copy.default and "device" in kwargs and not to_fake
    if to_fake:
        kwargs = {**kwargs, "device": torch.device("cpu")}
    out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
    if func._schema.is_mutable:  # in place / out=: hand back the caller's own tensor
        return args[0] if "out" not in kwargs else kwargs["out"]
    if (on_fake or to_fake) and not leaving:
        return tree_map(_wrap, out)
    return out


def _flat(args, kwargs) -> list:
    found = []
    tree_map(found.append, (args, kwargs))
    return found


def _unwrap(x):
    return x.inner if isinstance(x, FakeDeviceTensor) else x


def _wrap(x):
    return FakeDeviceTensor(x) if isinstance(x, torch.Tensor) else x


class _FakeDeviceMode(TorchDispatchMode):
    """Catches factories and moves that target the fake device (`torch.zeros(..., device=
    "meta")`, `x.to("meta")`), which no FakeDeviceTensor takes part in."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})


class _TensorFromDataMode(TorchFunctionMode):
    """`torch.tensor(data, device="meta")` fills its tensor below the dispatch modes: build it on
    the CPU and move it, so it lands on the fake device too."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor) and _is_fake_device(kwargs.get("device")):
            cpu = func(*args, **{**kwargs, "device": "cpu"})
            return cpu.to(DEVICE)
        return func(*args, **kwargs)


@contextmanager
def on_fake_device():
    with _TensorFromDataMode(), _FakeDeviceMode():
        yield


def to_fake_device(t: torch.Tensor) -> FakeDeviceTensor:
    """`t`'s values on the fake accelerator (outside `on_fake_device` too)."""
    return FakeDeviceTensor(t.detach().clone())
