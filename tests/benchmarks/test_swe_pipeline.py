"""The SWE pipeline benchmark's pure parts (benchmarks/swe_pipeline.py): where a variant's
records go and how an RL variant takes another run's warm start."""

import json
from pathlib import Path

import pytest

BENCHMARK = "swe_pipeline.py"


def _stage(run: Path, index: int, kind: str) -> Path:
    folder = run / f"{index}-{kind}"
    (folder / "policy").mkdir(parents=True)
    (folder / "policy" / "adapter_model.safetensors").write_bytes(b"w" * index)
    (folder / "stage.json").write_text(json.dumps({"index": index, "kind": kind}))
    return folder


def test_warm_start_copies_only_the_finished_sft_and_rft_stages(bench, tmp_path):
    source = tmp_path / "main"
    for i, kind in enumerate(("sft", "rft", "rl")):
        _stage(source, i, kind)
    (source / "3-rl2").mkdir()  # an unfinished stage: no stage.json
    variant = tmp_path / "variant"
    bench.copy_warm_start(source, variant)
    assert sorted(p.name for p in variant.iterdir()) == ["0-sft", "1-rft"]
    assert (variant / "1-rft" / "policy" / "adapter_model.safetensors").read_bytes() == b"w"
    bench.copy_warm_start(source, variant)  # again: the same stages are kept, not an error


def test_warm_start_refuses_a_different_stage_already_there_and_an_empty_source(bench, tmp_path):
    source, variant = tmp_path / "main", tmp_path / "variant"
    _stage(source, 0, "sft")
    other = _stage(variant, 0, "sft")
    (other / "stage.json").write_text(json.dumps({"index": 0, "kind": "sft", "kept": 3}))
    with pytest.raises(SystemExit, match="differs"):
        bench.copy_warm_start(source, variant)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no finished sft/rft stage"):
        bench.copy_warm_start(tmp_path / "empty", tmp_path / "v2")


def test_a_variants_records_live_apart_from_the_configs_own(bench):
    main = bench.record_path(0, "after RL 1", "sft-rft-rl-rl")
    variant = bench.record_path(0, "after RL 1", "sft-rft-rl-rl+lr5e-5-g8")
    assert main.name == variant.name == "s0_after_RL_1.json"
    assert main.parent != variant.parent
