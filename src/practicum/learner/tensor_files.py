"""Safetensors files read and written one tensor at a time, through plain Python file objects.

The format (github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}} padded
with spaces to a multiple of 8 bytes, then the tensors' bytes back to back, offsets counted
from the end of the header. The `safetensors` package writes a file from one whole dict and
reads through a memory map; here the writer streams tensors as they come (its header is
planned from their names, dtypes and shapes first) and the reader copies one tensor into
memory per call. Every open is Python's `open`, so an audit hook sees which process read
the weights (`sys.addaudithook`, event "open").
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
INDEX = "model.safetensors.index.json"
"""transformers' index of a model split over several files: {"weight_map": {name: file}}."""


@dataclass(frozen=True)
class Entry:
    """Where one tensor lies: its file, dtype, shape and byte range in that file."""

    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int


def read_header(file: Path) -> dict[str, Entry]:
    """The tensors a safetensors file holds, without reading them."""
    with open(file, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        if h["dtype"] not in DTYPES:
            raise ValueError(f"{file}: tensor {name} has dtype {h['dtype']}, not read here")
        begin, end = h["data_offsets"]
        out[name] = Entry(
            Path(file), DTYPES[h["dtype"]], tuple(h["shape"]), 8 + size + begin, 8 + size + end
        )
    return out


class TensorFiles:
    """The named tensors of some safetensors files: headers read at once, tensors on demand."""

    def __init__(self, files: Iterable[Path]):
        self.entries: dict[str, Entry] = {}
        for file in files:
            self.entries.update(read_header(file))

    @classmethod
    def in_folder(cls, folder: Path) -> TensorFiles:
        """Every *.safetensors file of a folder (a HF model, a peft adapter, a saved policy)."""
        files = sorted(Path(folder).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(
                f"{folder} holds no .safetensors file (weights are read from safetensors only)"
            )
        return cls(files)

    def read(self, name: str) -> Tensor:
        """One tensor, copied into memory (CPU)."""
        e = self.entries[name]
        data = torch.empty(e.end - e.start, dtype=torch.uint8)
        with open(e.file, "rb") as f:
            f.seek(e.start)
            if f.readinto(data.numpy()) != data.numel():
                raise OSError(f"{e.file} ends inside tensor {name}")
        return data.view(e.dtype).reshape(e.shape)


@dataclass(frozen=True)
class Planned:
    """A tensor a `StreamWriter` will receive: its name, dtype and shape."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


class StreamWriter:
    """Writes tensors, in the planned order, into safetensors files of at most `max_bytes` each
    (a tensor larger than that gets a file of its own), holding none of them after its write.

        with StreamWriter(folder, "model", plan, max_bytes) as writer:
            for name, tensor in tensors:
                writer.write(name, tensor)
            writer.close()   # the index json when there are several files

    Files are named as transformers names them: `{stem}.safetensors`, or
    `{stem}-00001-of-00003.safetensors` and so on plus `{stem}.safetensors.index.json`.
    """

    def __init__(self, folder: Path, stem: str, plan: list[Planned], max_bytes: int):
        self.folder, self.stem = Path(folder), stem
        groups: list[list[Planned]] = [[]]
        size = 0
        for p in plan:
            if groups[-1] and size + p.nbytes > max_bytes:
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += p.nbytes
        n = len(groups)
        names = (
            [f"{stem}.safetensors"]
            if n == 1
            else [f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        )
        self._files = list(zip(names, groups))
        self._order = iter([(i, p) for i, (_, g) in enumerate(self._files) for p in g])
        self._open: tuple[int, object] | None = None
        self.total_bytes = sum(p.nbytes for p in plan)

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, *exc) -> None:
        self._close_file()  # a failed write leaves no open file behind

    def write(self, name: str, tensor: Tensor) -> None:
        index, planned = next(self._order, (None, None))
        if planned is None or planned.name != name:
            raise ValueError(f"StreamWriter expected {planned and planned.name}, got {name}")
        if tensor.dtype != planned.dtype or tuple(tensor.shape) != planned.shape:
            raise ValueError(
                f"{name}: planned {planned.dtype} {planned.shape}, got "
                f"{tensor.dtype} {tuple(tensor.shape)}"
            )
        if self._open is None or self._open[0] != index:
            self._close_file()
            self._open = (index, self._start_file(index))
        data = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
        self._open[1].write(data.numpy())

    def close(self) -> list[str]:
        """Finish the last file, write the index when there are several; the files' names."""
        if next(self._order, None) is not None:
            raise ValueError("StreamWriter closed before every planned tensor was written")
        self._close_file()
        if len(self._files) > 1:
            weight_map = {p.name: file for file, group in self._files for p in group}
            (self.folder / f"{self.stem}.safetensors.index.json").write_text(
                json.dumps(
                    {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map},
                    indent=2,
                )
            )
        return [file for file, _ in self._files]

    def _start_file(self, index: int):
        file, group = self._files[index]
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for p in group:
            header[p.name] = {
                "dtype": NAMES[p.dtype],
                "shape": list(p.shape),
                "data_offsets": [offset, offset + p.nbytes],
            }
            offset += p.nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        f = open(self.folder / file, "wb")
        f.write(struct.pack("<Q", len(text)) + text)
        return f

    def _close_file(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None
