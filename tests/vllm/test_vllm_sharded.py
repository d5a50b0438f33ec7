"""vLLM beside a sharded learner (engine.weight_sync=broadcast): under torchrun (rank 0 starts
the engine without torchrun's variables) and with a Ray learner group, the ranks stream each
version to vLLM's worker over a gloo weight group, fingerprints appended and checked
(`verify_weights`); the engine then samples what the gathered file path gives it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import build_tiny_model
from tests.ranks import config, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_vllm_dir(tmp_path_factory) -> Path:
    """The tiny random Llama with 2 heads of 32 (vLLM's CPU attention takes head sizes from
    32 up)."""
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny_vllm"), num_attention_heads=2, num_key_value_heads=1
    )


def test_two_torchrun_ranks_stream_to_vllm_as_the_file_path_does(tiny_vllm_dir, tmp_path):
    cfg = config(
        tiny_vllm_dir,
        False,
        "engine.kind=vllm",
        "engine.weight_sync=broadcast",
        "engine.weight_bucket_mb=1",
        "engine.verify_weights=true",
        "engine.max_model_len=256",
        "train.lr=1e-3",
        "train.grad_clip=1.0",
        "placement={kind: torchrun, ranks: 2}",
    )
    torch.save((cfg, tmp_path), tmp_path / "args.pt")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "tests.ranks",
            "publish_to_vllm",
            str(tmp_path / "args.pt"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    draws = torch.load(tmp_path / "draws.pt")
    assert draws["launcher_variables"] == ["RANK", "WORLD_SIZE"]  # restored after the start
    assert draws["streamed"] == draws["file"]  # tokens and log-probs, exactly
    v0 = [lp for _, lp in draws["v0"][3:]]
    assert v0 != [lp for _, lp in draws["streamed"][3:]]  # version 1 is not version 0
    (tmp_path / "draws.pt").unlink()
    (tmp_path / "args.pt").unlink()


@pytest.fixture
def ray_here():
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _system_config={"worker_niceness": 0},
    )
    yield
    ray.shutdown()


def test_a_ray_learner_group_trains_two_steps_with_vllm(tiny_vllm_dir, tmp_path, ray_here):
    from practicum.config import load_config
    from practicum.runtime.train import run_training

    cfg = load_config(
        None,
        [
            f"model.model={tiny_vllm_dir}",
            "model.dtype=float32",
            "model.lora=false",
            "engine.kind=vllm",
            "engine.weight_sync=broadcast",
            "engine.max_model_len=256",
            "engine.verify_weights=true",
            "placement={kind: learner_group, ranks: 2, rank: {cpus: 0}}",
            "task.name=toy",
            "task.options.train_size=8",
            "task.options.eval_size=2",
            "rollout.group_size=2",
            "rollout.tasks_per_step=1",
            "rollout.max_turns=1",
            "sampling.max_new_tokens=4",
            "train.steps=2",
            "train.warmup_steps=0",
            "train.mini_batches=1",
            "eval.every=0",
            "algo.dynamic_sampling=false",
            "algo.mask_overlong=false",
            f"run.out_dir={tmp_path}",
            "run.name=g",
        ],
    )
    run_training(cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "g" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 2, rows
    assert all(r["logprob_gap"] < 5e-3 for r in steps), steps  # vLLM samples the ranks' weights
    summary = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert len(set(summary["learner_rank_pids"])) == 2
    assert summary["vllm"]["versions_streamed"] == 3  # versions 0, 1 and 2, by the ranks
