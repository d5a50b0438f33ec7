"""learner/tensor_files.py: safetensors read and written one tensor at a time, interchangeable
with the safetensors package's own files."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from practicum.learner.tensor_files import Planned, StreamWriter, TensorFiles


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a": torch.randn(30, 4, generator=g),
        "b": torch.randn(5, generator=g).bfloat16(),
        "steps": torch.arange(7),
        "scale": torch.tensor(0.5),
        "empty": torch.zeros(0, 3),
        "c": torch.randn(2, 3, 20, generator=g).half(),
    }


def plan(ts: dict) -> list[Planned]:
    return [Planned(k, v.dtype, tuple(v.shape)) for k, v in ts.items()]


def test_streamed_files_split_by_size_and_read_back_with_safetensors(tmp_path):
    ts = tensors()
    with StreamWriter(tmp_path, "model", plan(ts), max_bytes=200) as writer:
        for name, t in ts.items():
            writer.write(name, t)
        files = writer.close()
    # a (480 bytes) alone, then b + steps + scale + empty (10 + 56 + 4 + 0), then c (240) alone
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["a"] == files[0] and index["weight_map"]["c"] == files[2]
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in ts.values())
    read = {}
    for f in files:
        read.update(load_file(tmp_path / f))
    assert read.keys() == ts.keys()
    for k, t in ts.items():
        assert read[k].dtype == t.dtype and torch.equal(read[k], t), k


def test_one_file_without_an_index_and_the_order_is_checked(tmp_path):
    ts = tensors()
    with StreamWriter(tmp_path, "adapter_model", plan(ts), max_bytes=1 << 30) as writer:
        with pytest.raises(ValueError, match="expected a, got b"):
            writer.write("b", ts["b"])
    assert not (tmp_path / "adapter_model.safetensors.index.json").exists()
    with StreamWriter(tmp_path, "adapter_model", plan(ts), max_bytes=1 << 30) as writer:
        writer.write("a", ts["a"])
        with pytest.raises(ValueError, match="before every planned tensor"):
            writer.close()


def test_the_reader_reads_safetensors_files_one_tensor_at_a_time(tmp_path):
    ts = tensors()
    save_file(dict(list(ts.items())[:3]), tmp_path / "one.safetensors")
    save_file(dict(list(ts.items())[3:]), tmp_path / "two.safetensors")
    files = TensorFiles.in_folder(tmp_path)
    assert set(files.entries) == set(ts)
    for k, t in ts.items():
        got = files.read(k)
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t), k
