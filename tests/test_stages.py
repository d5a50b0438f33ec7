"""The stage pipeline (practicum.stages): per-stage configs, the curriculum refresh rule, and
an rft -> rl -> refreshed rl run of a tiny model on the toy repository task, resumed."""

from __future__ import annotations

import json
import shutil

import pytest

from practicum.config import load_config
from practicum.envs.swe.toy_repo import write_toy_instance
from practicum.errors import ConfigError
from practicum.serve.loading import resolve_target
from practicum.stages import _resolve, _stored, pipeline_policy, run_stages, stage_config

STAGES = [
    {"name": "rft", "kind": "rft"},
    {"name": "rl", "kind": "rl"},
    {
        "name": "rl2",
        "kind": "rl",
        "curriculum_refresh": True,
        "overrides": {"rollout.max_turns": 3, "task.options.obs_chars": 400},
    },
]


def config(tmp_path, model_dir, stages=STAGES):
    write_toy_instance(tmp_path / "suite", repos={"toy__other-1": "toy/other"})
    return load_config(
        None,
        [
            f"run.out_dir={tmp_path / 'runs'}",
            "run.name=pipe",
            f"model.model={model_dir}",
            "task.name=swe",
            f"task.options.instances={tmp_path / 'suite' / 'toy.jsonl'}",
            "task.options.held_out_packages=[other]",
            "task.options.few_shot=false",
            "sampling.max_new_tokens=8",
            "rollout.max_turns=2",
            "rollout.max_seq_len=1024",
            "rollout.group_size=2",
            "rollout.tasks_per_step=1",
            "rollout.env_workers=2",
            "train.steps=1",
            "train.mini_batches=1",
            "train.max_skipped_batches=1",
            "algo.max_refill_rounds=0",
            "rft.samples_per_task=2",
            "curriculum.min_attempts=2",
            f"stages={json.dumps(stages)}",
        ],
    )


def test_stage_config_applies_overrides_in_its_own_folder(tmp_path):
    cfg = config(tmp_path, "smollm2-135m-instruct")
    sub = stage_config(cfg, 2, "/some/policy")
    assert sub.rollout.max_turns == 3 and sub.task.options["obs_chars"] == 400
    assert sub.run_dir == cfg.run_dir / "2-rl2" and sub.model.init == "/some/policy"
    assert sub.stages == [] and stage_config(cfg, 0, None).rollout.max_turns == 2
    bad = config(tmp_path, "m", [{"name": "a", "kind": "rl", "overrides": {"rollout.nope": 1}}])
    with pytest.raises(ConfigError, match=r"stages\[0\].*nope"):
        stage_config(bad, 0, None)
    bad = config(
        tmp_path, "m", [{"name": "a", "kind": "rl", "overrides": {"task.options.obs_chars": -1}}]
    )
    with pytest.raises(ConfigError, match=r"stages\[0\].*obs_chars"):
        stage_config(bad, 0, None)
    with pytest.raises(ConfigError, match="stages.0.kind"):
        config(tmp_path, "m", [{"name": "a", "kind": "ppo"}])


def test_pipeline_runs_every_stage_and_resumes(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir)
    report = run_stages(cfg, progress=False)
    kinds = [(r["name"], r["kind"]) for r in report["stages"]]
    assert kinds == [("rft", "rft"), ("rl", "rl"), ("rl2", "rl")]
    rft, rl, rl2 = report["stages"]
    assert rft["episodes"] == 2 and (tmp_path / "runs/pipe/0-rft/rft/policy").is_dir()
    assert rl["held_out_tasks"] == 1 and rl["held_out_before"] == rft["held_out_after"]
    # a random model solves nothing: no group has a signal, the RL stages stop without a step
    assert rl["steps"] == 0 and "nothing to train on" in rl["stopped"]
    assert rl["policy"] == rft["policy"] and rl2["policy"] == rft["policy"]
    # the refresh found the only training task never solved in 4 attempts: dropping it would
    # leave nothing, so every task is kept
    assert rl2["train_tasks"] is None
    table = (tmp_path / "runs/pipe/report.md").read_text()
    assert "| 0-rft | rft |" in table and "| 2-rl2 | rl |" in table
    n = sum(1 for _ in (tmp_path / "runs/pipe/1-rl/episodes.jsonl").open())
    again = run_stages(cfg, progress=False)  # finished stages are not redone
    assert [r["episodes"] for r in again["stages"]] == [r["episodes"] for r in report["stages"]]
    assert sum(1 for _ in (tmp_path / "runs/pipe/1-rl/episodes.jsonl").open()) == n


def test_stage_markers_hold_paths_relative_to_the_pipeline(tmp_path):
    run = tmp_path / "runs" / "swe"
    (run / "0-rft" / "rft" / "policy").mkdir(parents=True)
    assert _stored(str(run / "0-rft" / "rft" / "policy"), run) == "0-rft/rft/policy"
    assert _stored("/elsewhere/policy", run) == "/elsewhere/policy"  # outside: kept as is
    assert _resolve("0-rft/rft/policy", run) == str(run / "0-rft" / "rft" / "policy")
    # a marker written before: relative to the working directory of training
    assert _resolve("runs/swe/0-rft/rft/policy", run) == str(run / "0-rft" / "rft" / "policy")
    assert _resolve("/abs/policy", run) == "/abs/policy"


def test_a_moved_pipeline_still_resumes_and_serves_its_last_policy(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir, STAGES[:2])
    run_stages(cfg, progress=False)
    marker = json.loads((tmp_path / "runs/pipe/1-rl/stage.json").read_text())
    assert marker["policy"] == "0-rft/rft/policy" and marker["run_dir"] == "1-rl"
    moved = tmp_path / "elsewhere" / "pipe"
    shutil.move(tmp_path / "runs" / "pipe", moved)
    assert pipeline_policy(moved) == moved / "0-rft" / "rft" / "policy"
    target = resolve_target(moved)
    assert target.policy_dir == moved / "0-rft" / "rft" / "policy" and target.name == "pipe"
    cfg2 = cfg.model_copy(update={"run": cfg.run.model_copy(update={"out_dir": str(moved.parent)})})
    again = run_stages(cfg2, progress=False)  # finished stages found, none redone
    assert [r["policy"] for r in again["stages"]] == [str(moved / "0-rft/rft/policy")] * 2
