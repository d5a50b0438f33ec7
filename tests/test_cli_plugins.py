"""A package outside practicum adds an environment with a command of its own and an engine,
through entry points alone (tests/plugins/practicum_stand_in.py): `practicum --help` lists
the command, the command runs, and `practicum train` trains on the environment with the
engine, with no edit in src/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugins"
ENTRY_POINTS = """\
[practicum.commands]
echo = practicum_stand_in

[practicum.engines]
traced = practicum_stand_in

[practicum.envs]
echo = practicum_stand_in
"""


@pytest.fixture
def practicum(tmp_path):
    """argv -> the finished `python -m practicum.cli ...` process, in an environment where the
    stand-in package is installed (its module on the path, its dist-info beside it)."""
    site = tmp_path / "site"
    dist = site / "practicum_stand_in-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: practicum-stand-in\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    path = os.pathsep.join(p for p in (str(site), str(PLUGIN), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "practicum.cli", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    return run


def test_a_plugin_command_is_listed_and_runs(practicum):
    listing = practicum("--help")
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert "the stand-in environment's own command" in listing.stdout
    done = practicum("echo", "tasks", "--count", "3")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["echo-train/0", "echo-train/1", "echo-train/2"]


@pytest.mark.slow
def test_practicum_trains_on_a_plugin_environment_with_a_plugin_engine(
    practicum, tmp_path, tiny_model_dir
):
    trace = tmp_path / "trace.txt"
    done = practicum(
        "train",
        "-q",
        f"model.model={tiny_model_dir}",
        "model.dtype=float32",
        "task.name=echo",
        "task.options.tasks=2",
        "engine.kind=traced",
        f"engine.trace={trace}",
        "rollout.group_size=2",
        "rollout.tasks_per_step=1",
        "rollout.max_turns=1",
        "sampling.max_new_tokens=4",
        "train.steps=1",
        "eval.every=0",
        "eval.size=1",
        "algo.dynamic_sampling=false",
        "algo.mask_overlong=false",
        f"run.out_dir={tmp_path}",
        "run.name=plugin",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "plugin"
    config = (run / "config.yaml").read_text()
    assert f"engine:\n  kind: traced\n  trace: {trace}\n" in config
    # the plugin engine sampled everything: held-out before (1 task), the group, held-out after
    assert trace.read_text().split() == ["1", "2", "1"]
    episodes = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and episodes[0]["task_id"] == episodes[1]["task_id"]
    for episode in episodes:  # graded by the plugin environment: the reply's share of vowels
        letters = [c for c in episode["turns"][0]["action_text"].lower() if c.isalpha()]
        share = sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0
        assert episode["turns"][0]["reward"] == pytest.approx(share)
    assert json.loads((run / "summary.json").read_text())["steps"] == 1
