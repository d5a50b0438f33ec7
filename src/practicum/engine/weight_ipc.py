"""The buffer a weight stream shares in place when its sender and receivers run on one machine
(`WeightTarget.transport == "ipc"`): the sender fills one bucket at a time and the receivers
copy it out of the same memory; only control messages (the header, "bucket ready", "bucket
taken") go over the weight group. On a GPU the buffer is CUDA memory shared by a CUDA IPC
handle, the way a learner reaches a sampler on its own GPU, where NCCL cannot join two
processes (SkyRL and verl do the same with `torch.multiprocessing`'s reductions); on CPU it is
a file in shared memory (/dev/shm) that every member maps.

    bucket = SharedBucket.create(nbytes, device)      # sender
    handle = bucket.handle                            # -> header (picklable)
    view = open_shared(handle)                        # each receiver: a uint8 tensor
    bucket.forget()                                   # sender, once all have opened it
"""

from __future__ import annotations

import base64
import io
import os
import pickle
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch


def machine_id() -> str:
    """Which machine this process runs on (the boot id, else the host name): an ipc stream is
    refused in one line when a receiver is not on the sender's."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def _shm_dir() -> str:
    return (
        "/dev/shm"
        if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
        else tempfile.gettempdir()
    )


@dataclass
class SharedBucket:
    """The sender's buffer (`nbytes` of uint8) and the handle its receivers open it by."""

    buffer: torch.Tensor
    handle: dict
    path: Path | None = None
    """The CPU buffer's file, removed once every receiver has mapped it (`forget`)."""

    @classmethod
    def create(cls, nbytes: int, device: torch.device) -> SharedBucket:
        nbytes = max(1, nbytes)
        if device.type == "cuda":
            buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
            return cls(buffer, cuda_handle(buffer))
        path = Path(_shm_dir()) / f"practicum-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with open(path, "wb") as f:
            f.truncate(nbytes)
        buffer = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
        return cls(buffer, {"machine": machine_id(), "file": str(path), "nbytes": nbytes}, path)

    def view(self, dtype: torch.dtype, numel: int) -> torch.Tensor:
        """The first `numel` elements of the buffer as `dtype`."""
        return self.buffer[: numel * dtype.itemsize].view(dtype)

    def forget(self) -> None:
        """Remove the CPU buffer's file (the mappings stay valid): nothing is left in
        /dev/shm, whatever happens to the processes later."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


def cuda_handle(tensor: torch.Tensor) -> dict:
    """A handle by which another process on this machine opens `tensor` (a CUDA tensor) in
    place (`open_shared`); the tensor must stay alive until it has copied what it needs."""
    from torch.multiprocessing.reductions import reduce_tensor

    rebuild, args = reduce_tensor(tensor)
    gpu = str(torch.cuda.get_device_properties(tensor.device).uuid)
    return {
        "machine": machine_id(),
        "cuda": base64.b64encode(pickle.dumps((rebuild, args))).decode(),
        "gpu": gpu,
    }


def open_shared(handle: dict) -> torch.Tensor:
    """A receiver's view of the sender's buffer (uint8) or tensor. CUDA: the handle is opened
    on this process's device with the sender's GPU (device indices differ between processes
    that see different GPUs)."""
    if handle["machine"] != machine_id():
        raise RuntimeError(
            "weight transport ipc: this receiver runs on another machine than "
            "the sender; use the collective transport across machines"
        )
    if "file" in handle:
        return torch.from_file(
            handle["file"], shared=True, size=handle["nbytes"], dtype=torch.uint8
        )
    rebuild, args = _TorchOnly(io.BytesIO(base64.b64decode(handle["cuda"]))).load()
    local = [
        i
        for i in range(torch.cuda.device_count())
        if str(torch.cuda.get_device_properties(i).uuid) == handle["gpu"]
    ]
    if not local:
        raise RuntimeError(
            f"weight transport ipc: the sender's GPU {handle['gpu']} is not "
            f"visible to this receiver"
        )
    args = list(args)
    args[6] = local[0]  # rebuild_cuda_tensor's storage_device
    return rebuild(*args)


class _TorchOnly(pickle.Unpickler):
    """Unpickles a CUDA IPC handle and nothing else: `reduce_tensor`'s rebuild function, and
    torch's tensor, size, storage and dtype classes (a weight group's messages come over
    the network)."""

    def find_class(self, module: str, name: str):
        if (
            (module, name) == ("torch.multiprocessing.reductions", "rebuild_cuda_tensor")
            or (
                module in ("torch", "torch.storage")
                and name in ("Tensor", "Size", "TypedStorage", "UntypedStorage")
            )
            or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype))
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"not part of a CUDA IPC handle: {module}.{name}")
