"""Whole-run helpers for the runtime tests, as fixtures: toy overrides, one-call training,
metric readers, a local Ray (the peaked tiny model is tests/conftest.py's)."""

import json
from pathlib import Path

import pytest


def _toy_overrides(model_dir: Path, out: Path, steps: int, *extra: str) -> list[str]:
    """Full fine-tuning of the tiny model on the toy task; replies of 4 tokens, so every one is
    cut by max_new_tokens: overlong masking is off."""
    return [
        f"model.model={model_dir}",
        "model.dtype=float32",
        "model.lora=false",
        "task.name=toy",
        "task.options.train_size=64",
        "task.options.eval_size=8",
        "rollout.group_size=8",
        "rollout.tasks_per_step=4",
        "rollout.max_turns=1",
        "sampling.max_new_tokens=4",
        "train.micro_batch_size=16",
        "train.warmup_steps=0",
        "train.lr=3e-3",
        f"train.steps={steps}",
        "train.checkpoint_every=2",
        "eval.every=0",
        "algo.dynamic_sampling=false",
        "algo.mask_overlong=false",
        f"run.out_dir={out}",
        "run.name=toy",
        *extra,
    ]


def _metric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def _train_run(cfg):
    from practicum.runtime.train import run_training

    return run_training(cfg, progress=False)


@pytest.fixture(scope="session")
def toy_overrides():
    return _toy_overrides


@pytest.fixture(scope="session")
def metric_rows():
    return _metric_rows


@pytest.fixture(scope="session")
def train_run():
    return _train_run


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (pools, engines and learners join it instead of starting
    their own); a module uses it with `pytestmark = pytest.mark.usefixtures("local_ray")`."""
    import os

    import ray

    # Ray starts workers at nice 15: on a busy 2-core machine an actor loading a model then
    # gets almost no CPU and misses its start-up limit
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
