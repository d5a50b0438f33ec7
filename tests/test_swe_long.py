"""configs/swe_long.yaml: its stages validate at their long contexts, and one RL step of it runs
on the tiny random Llama, shrunk by overrides, with YaRN x2 carrying its rows past the model's
native context (cut to 512 positions here, so the toy task's episodes pass it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from practicum.config import load_config
from practicum.engine.rope import check_context
from practicum.envs.swe.toy_repo import write_toy_instance
from practicum.errors import ConfigError
from practicum.stages import stage_config
from practicum.store import EpisodeStore

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "swe_long.yaml"


def test_each_stage_fits_its_rows_in_the_scaled_context_of_a_32k_model(tmp_path):
    """Stage 1 at 65,536 tokens (YaRN x2), stage 2 at 131,072 (x4), on a model whose config
    says 32,768 positions (Qwen2.5's); one token more is refused."""
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "max_position_embeddings": 32768, "rope_theta": 1e6})
    )
    cfg = load_config(CONFIG, [f"run.out_dir={tmp_path}"])
    for index, tokens in ((1, 65536), (2, 131072)):
        sub = stage_config(cfg, index, None)
        scaling = sub.model.rope_scaling.model_dump(exclude_none=True)
        assert sub.rollout.max_seq_len == sub.engine.max_model_len == tokens
        assert check_context(tmp_path, scaling, tokens, "rollout.max_seq_len") == tokens
        with pytest.raises(ConfigError, match=f"{tokens + 1} tokens exceed"):
            check_context(tmp_path, scaling, tokens + 1, "rollout.max_seq_len")


@pytest.mark.slow
def test_one_step_of_swe_long_on_the_tiny_model(tmp_path, tiny_model_dir):
    from practicum.runtime.train import run_training

    write_toy_instance(tmp_path / "suite", repos={"toy__other-1": "toy/other"})
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    cfg = load_config(
        CONFIG,
        [
            f"run.out_dir={tmp_path / 'runs'}",
            f"model.model={model}",
            "model.dtype=float32",
            "model.device=cpu",
            "model.lora_r=4",
            "model.lora_alpha=8",
            "model.gradient_checkpointing=true",
            "model.rope_scaling={rope_type: yarn, factor: 2}",  # 512 -> 1024 positions
            "engine={kind: hf}",
            "placement={kind: local}",
            "stages=[]",
            f"task.options.instances={tmp_path / 'suite' / 'toy.jsonl'}",
            "task.options.held_out_packages=[other]",
            "task.options.tiers=[1]",
            "task.options.eval_size=1",
            "sampling.max_new_tokens=400",
            "rollout.max_turns=5",
            "rollout.max_seq_len=1024",
            "rollout.group_size=2",
            "rollout.tasks_per_step=1",
            "rollout.env_workers=2",
            "train.steps=1",
            "train.mini_batches=1",
            "train.max_skipped_batches=1",
            "algo.dynamic_sampling=false",
            "algo.max_refill_rounds=0",
            "algo.mask_overlong=false",
            "eval.every=0",
            "eval.size=1",
        ],
    )
    summary = run_training(cfg, progress=False)
    assert summary["steps"] == 1
    run = tmp_path / "runs" / "swe_long"
    trained = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(m.get("train_rows", 0) for m in trained) == 2
    longest = max(
        len(seg.input_ids) for e in EpisodeStore(run / "episodes.jsonl") for seg in e.segments()
    )
    assert 512 < longest <= 1024  # past the native context, within YaRN's
