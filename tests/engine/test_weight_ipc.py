"""The ipc transport's handles (`weight_ipc`): a CUDA IPC handle comes over the network as a
pickle, so it is read by an unpickler that admits `reduce_tensor`'s rebuild function and
torch's tensor, size, storage and dtype classes only; the CPU buffer is a file in shared
memory that is gone once forgotten."""

import io
import os
import pickle

import pytest
import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor

from practicum.engine.weight_ipc import SharedBucket, _TorchOnly, open_shared


def unpickle(data: bytes):
    return _TorchOnly(io.BytesIO(data)).load()


def test_a_cuda_handle_unpickles_and_nothing_else_does():
    """The shape of `reduce_tensor`'s answer for a CUDA tensor (made here without a GPU)
    comes back whole; a pickle that would call anything else is refused."""
    args = (
        torch.Tensor,
        torch.Size([8]),
        (1,),
        0,
        torch.storage.TypedStorage,
        torch.uint8,
        0,
        b"\x01" * 64,
        8,
        0,
        False,
        b"ref",
        0,
        b"\x02" * 64,
        True,
    )
    fn, got = unpickle(pickle.dumps((rebuild_cuda_tensor, args)))
    assert fn is rebuild_cuda_tensor and got == args

    class Evil:
        def __reduce__(self):
            return os.system, ("echo owned",)

    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        unpickle(pickle.dumps((rebuild_cuda_tensor, (Evil(),))))
    with pytest.raises(pickle.UnpicklingError):
        unpickle(pickle.dumps(torch.load))  # a torch function, but not a rebuild one


def test_the_cpu_buffer_is_shared_and_its_file_removed_once_forgotten():
    """What the sender writes into its buffer is what a second mapping (a receiver's) reads,
    and after `forget` the file is gone while both mappings still work."""
    bucket = SharedBucket.create(64, torch.device("cpu"))
    path = bucket.path
    assert path is not None and path.exists()
    theirs = open_shared(bucket.handle)
    bucket.view(torch.float32, 4).copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    bucket.forget()
    assert not path.exists()
    assert theirs[:16].view(torch.float32).tolist() == [1.0, 2.0, 3.0, 4.0]
