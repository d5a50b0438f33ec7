"""Whole tiny trainings: the policy learns, a killed run resumes exactly, the real model runs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from practicum.config import load_config
from practicum.runtime.session import open_session
from practicum.runtime.sync import run_sync


@pytest.fixture(scope="module")
def peaked_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny random model with embeddings scaled x4: its next-token distribution has ~5 nats
    of entropy instead of ~10.8, so RL credit concentrates on tokens it actually samples."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("peaked")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(4)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def toy_overrides(model_dir: Path, out: Path, steps: int) -> list[str]:
    return [f"model.model={model_dir}", "model.dtype=float32", "model.lora=false",
            "task.name=toy", "task.train_size=64", "task.eval_size=8",
            "rollout.group_size=8", "rollout.tasks_per_step=4", "rollout.max_turns=1",
            "sampling.max_new_tokens=4", "train.micro_batch_size=32", "train.warmup_steps=0",
            "train.lr=3e-3", f"train.steps={steps}", "train.checkpoint_every=2",
            "eval.every=0", "algo.dynamic_sampling=false", f"run.out_dir={out}", "run.name=toy"]


@pytest.mark.slow
def test_tiny_model_learns_the_toy_task(peaked_model_dir, tmp_path):
    cfg = load_config(None, toy_overrides(peaked_model_dir, tmp_path, steps=10))
    summary = run_sync(open_session(cfg), progress=False)
    rows = [json.loads(x) for x in (tmp_path / "toy" / "metrics.jsonl").read_text().splitlines()]
    train = [r["reward_mean"] for r in rows if "reward_mean" in r]
    assert sum(train[-3:]) / 3 > sum(train[:3]) / 3 + 0.15, train
    assert summary["eval_after"]["reward_mean"] > summary["eval_before"]["reward_mean"]
    assert (tmp_path / "toy" / "reward.png").stat().st_size > 1000
    episodes = (tmp_path / "toy" / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 10 * 32
    # the trainer saw exactly the engine's log-probs for the same weights
    assert max(r["logprob_gap_max"] for r in rows if "logprob_gap_max" in r) < 1e-3


def _train_cmd(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "practicum.cli", "train", "-q", *overrides]


def _final_weights(run: Path) -> dict:
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    files = sorted((ckpt / "policy").glob("*.safetensors"))
    assert files, f"no weights in {ckpt}"
    out = {}
    for f in files:
        out.update(load_file(f))
    return out


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_result(peaked_model_dir, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ref = subprocess.run(_train_cmd(toy_overrides(peaked_model_dir, tmp_path / "a", 4)),
                         env=env, capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-2000:]

    over = toy_overrides(peaked_model_dir, tmp_path / "b", 4)
    proc = subprocess.Popen(_train_cmd(over), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    latest = tmp_path / "b" / "toy" / "checkpoints" / "latest"
    deadline = time.time() + 600
    while not (latest.exists() and latest.read_text().strip() == "step_000002"):
        assert proc.poll() is None, "run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(_train_cmd(over), env=env, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    a, b = _final_weights(tmp_path / "a" / "toy"), _final_weights(tmp_path / "b" / "toy")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # nothing trained twice or skipped: the same episodes, in the same order
    ea = [json.loads(x)["task_id"] for x in (tmp_path / "a/toy/episodes.jsonl").read_text().splitlines()]
    eb = [json.loads(x)["task_id"] for x in (tmp_path / "b/toy/episodes.jsonl").read_text().splitlines()]
    assert ea == eb


@pytest.mark.slow
@pytest.mark.real_model
def test_real_smollm2_trains_a_few_steps_on_the_calculator_task(smollm2_dir, tmp_path):
    cfg = load_config(None, [
        f"model.model={smollm2_dir}", "rollout.group_size=2", "rollout.tasks_per_step=2",
        "rollout.max_turns=2", "sampling.max_new_tokens=24", "train.steps=2",
        "train.micro_batch_size=4", "task.train_size=8", "task.eval_size=2", "eval.every=0",
        "algo.dynamic_sampling=false", f"run.out_dir={tmp_path}", "run.name=real"])
    summary = run_sync(open_session(cfg), progress=False)
    rows = [json.loads(x) for x in (tmp_path / "real" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 2 and all(r["grad_norm"] >= 0 for r in steps)
    assert all(r["logprob_gap"] < 0.05 for r in steps), [r["logprob_gap"] for r in steps]
    assert summary["steps"] == 2 and (tmp_path / "real" / "summary.json").exists()
    first = json.loads((tmp_path / "real" / "episodes.jsonl").read_text().splitlines()[0])
    assert first["turns"] and first["turns"][0]["action_text"].strip()
