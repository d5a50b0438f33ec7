"""Whole synchronous trainings on the tiny model: it learns; a run killed at any point resumes
to exactly the same weights and episodes; the real model trains a few steps."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import practicum.learner.checkpoint as checkpoint_mod
from practicum.config import load_config
from practicum.store import EpisodeStore, read_ledger


@pytest.mark.slow
def test_tiny_model_learns_the_toy_task(
    peaked_model_dir, tmp_path, toy_overrides, train_run, metric_rows
):
    cfg = load_config(None, toy_overrides(peaked_model_dir, tmp_path, 10))
    summary = train_run(cfg)
    rows = metric_rows(tmp_path / "toy")
    train = [r["reward_mean"] for r in rows]
    assert sum(train[-3:]) / 3 > train[0] + 0.15, train
    assert summary["eval_after"]["reward_mean"] > summary["eval_before"]["reward_mean"]
    assert (tmp_path / "toy" / "reward.png").stat().st_size > 1000
    assert len(EpisodeStore(tmp_path / "toy" / "episodes.jsonl")) == 10 * 32
    assert max(r["logprob_gap_max"] for r in rows) < 1e-3  # trainer saw the engine's log-probs
    assert all(r["updates"] == 2 and r["clip_frac_per_update"][0] == 0 for r in rows)
    assert any(r["clip_frac_per_update"][1] > 0 for r in rows)  # clip-higher binds


@pytest.mark.slow
def test_tiny_model_learns_the_toy_task_under_a_grammar(
    peaked_model_dir, tmp_path, toy_overrides, train_run, metric_rows
):
    """Every reply (training and evaluation) is sampled under the toy's grammar and the learner
    scores it under the same grammar: log-probs agree and the policy still learns."""
    word = "start: /[a-z]{1,8}/"
    cfg = load_config(
        None, toy_overrides(peaked_model_dir, tmp_path, 8, f'task.options.grammar="{word}"')
    )
    summary = train_run(cfg)
    rows = metric_rows(tmp_path / "toy")
    train = [r["reward_mean"] for r in rows]
    assert sum(train[-3:]) / 3 > train[0] + 0.1, train
    assert max(r["logprob_gap_max"] for r in rows) < 1e-3
    episodes = list(EpisodeStore(tmp_path / "toy" / "episodes.jsonl"))
    assert len(episodes) == 8 * 32
    assert all(
        t.grammar == word and re.fullmatch("[a-z]{1,8}", t.action_text)
        for e in episodes
        for t in e.turns
    )
    evaluated = json.loads((tmp_path / "toy" / "eval" / "step_000000.json").read_text())
    assert all(re.fullmatch("[a-z]{1,8}", e["turns"][0]) for e in evaluated["episodes"])
    assert summary["eval_after"]["reward_mean"] > summary["eval_before"]["reward_mean"]


# -- exact resume ---------------------------------------------------------------------------------
class Crash(BaseException):
    """Stands in for SIGKILL: nothing catches it, nothing after it runs."""


@pytest.fixture(scope="module")
def refill_overrides(toy_overrides):
    """Groups of 2 one-token replies: many groups have equal rewards, so dynamic sampling
    filters them and refill rounds draw more tasks."""
    return lambda model_dir, out, name, *extra: toy_overrides(
        model_dir,
        out,
        5,
        "rollout.group_size=2",
        "rollout.tasks_per_step=3",
        "sampling.max_new_tokens=1",
        "algo.dynamic_sampling=true",
        "algo.max_refill_rounds=2",
        "train.max_skipped_batches=20",
        f"run.name={name}",
        *extra,
    )


def weights(run_dir: Path) -> dict:
    ckpt = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    out = {}
    for f in sorted((ckpt / "policy").glob("*.safetensors")):
        out.update(load_file(f))
    return out


def episodes(run_dir: Path) -> list:
    return [
        (e.group_id, e.info.get("slot"), [t.sampled_ids for t in e.turns])
        for e in EpisodeStore(run_dir / "episodes.jsonl")
    ]


def crash_on_call(monkeypatch, owner, name, n, after=True):
    """Make the n-th call of owner.name crash (after doing its work, or before)."""
    real, count = getattr(owner, name), [0]

    def wrapped(*args, **kwargs):
        count[0] += 1
        if count[0] == n and not after:
            raise Crash(name)
        out = real(*args, **kwargs)
        if count[0] == n:
            raise Crash(name)
        return out

    monkeypatch.setattr(owner, name, wrapped)


@pytest.fixture(scope="module")
def reference(peaked_model_dir, tmp_path_factory, refill_overrides, train_run):
    out = tmp_path_factory.mktemp("ref")
    cfg = load_config(None, refill_overrides(peaked_model_dir, out, "ref"))
    train_run(cfg)
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    assert any(r["filtered"] for r in rows)  # refill rounds really ran
    return cfg.run_dir


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        "after episodes stored",
        "between refill rounds",
        "after the ledger row",
        "mid-checkpoint re-save",
    ],
)
def test_a_run_killed_anywhere_resumes_exactly(
    point, reference, peaked_model_dir, tmp_path, monkeypatch, refill_overrides, train_run
):
    from practicum.store.episodes import EpisodeStore as Store

    # checkpoints never change what is trained: every 5 steps makes finish() re-save step 5
    extra = ["train.checkpoint_every=5"] if point == "mid-checkpoint re-save" else []
    cfg = load_config(None, refill_overrides(peaked_model_dir, tmp_path, "run", *extra))
    with monkeypatch.context() as m:
        if point == "after episodes stored":
            crash_on_call(m, Store, "append", 4)  # the store holds a batch never trained on
        elif point == "between refill rounds":
            rounds = [r for r in read_ledger(reference / "consumed.jsonl") if r["filtered"]]
            crash_on_call(m, Store, "append", rounds[0]["batch"] + 1)
        elif point == "after the ledger row":
            from practicum.store.ledger import ConsumptionLedger

            crash_on_call(m, ConsumptionLedger, "record", 3)  # after step 3, before ckpt at 4
        else:  # crash between moving the old step 5 aside and renaming the new one in
            replace = os.replace

            def flaky(src, dst):
                if (
                    Path(src).name == ".tmp_step_000005"
                    and (Path(dst).parent / ".aside_step_000005").exists()
                ):
                    raise Crash("mid re-save")
                return replace(src, dst)

            m.setattr(checkpoint_mod.os, "replace", flaky)
        with pytest.raises(Crash):
            train_run(cfg)
    if point == "mid-checkpoint re-save":
        ckpts = cfg.run_dir / "checkpoints"
        assert not (ckpts / "step_000005").exists() and (ckpts / ".aside_step_000005").exists()
    summary = train_run(
        load_config(None, refill_overrides(peaked_model_dir, tmp_path, "run", *extra))
    )
    assert summary["steps"] == 5
    a, b = weights(reference), weights(cfg.run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert episodes(cfg.run_dir) == episodes(reference)  # same draws, nothing re-drawn or lost
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    positions = [p for r in rows for k in ("trained", "filtered", "dropped") for p, _ in r[k]]
    assert sorted(positions) == list(range(len(EpisodeStore(cfg.run_dir / "episodes.jsonl"))))


@pytest.mark.slow
def test_a_sigkilled_process_resumes_to_the_same_result(peaked_model_dir, tmp_path, toy_overrides):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "practicum.cli", "train", "-q"]
    ref = subprocess.run(
        cmd + toy_overrides(peaked_model_dir, tmp_path / "a", 4),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ref.returncode == 0, ref.stderr[-2000:]
    over = toy_overrides(peaked_model_dir, tmp_path / "b", 4)
    proc = subprocess.Popen(
        cmd + over, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    latest = tmp_path / "b" / "toy" / "checkpoints" / "latest"
    deadline = time.time() + 600
    while not (latest.exists() and latest.read_text().strip() == "step_000002"):
        assert proc.poll() is None, "run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(cmd + over, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = weights(tmp_path / "a" / "toy"), weights(tmp_path / "b" / "toy")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert episodes(tmp_path / "a" / "toy") == episodes(tmp_path / "b" / "toy")


@pytest.mark.slow
@pytest.mark.real_model
def test_real_smollm2_trains_a_few_steps_on_the_calculator_task(
    smollm2_dir, tmp_path, train_run, metric_rows
):
    cfg = load_config(
        None,
        [
            f"model.model={smollm2_dir}",
            "rollout.group_size=2",
            "rollout.tasks_per_step=2",
            "rollout.max_turns=2",
            "sampling.max_new_tokens=24",
            "train.steps=2",
            "train.micro_batch_size=4",
            "task.options.train_size=8",
            "task.options.eval_size=2",
            "eval.every=0",
            "algo.dynamic_sampling=false",
            f"run.out_dir={tmp_path}",
            "run.name=real",
        ],
    )
    summary = train_run(cfg)
    rows = metric_rows(tmp_path / "real")
    assert len(rows) == 2 and all(r["updates"] == 2 for r in rows)
    assert all(r["logprob_gap"] < 0.05 for r in rows), [r["logprob_gap"] for r in rows]
    assert summary["steps"] == 2 and (tmp_path / "real" / "summary.json").exists()
    first = json.loads((tmp_path / "real" / "episodes.jsonl").read_text().splitlines()[0])
    assert first["turns"] and first["turns"][0]["action_text"].strip()


@pytest.mark.slow
def test_the_curriculum_stops_drawing_tasks_that_teach_nothing(
    peaked_model_dir, tmp_path, toy_overrides, train_run
):
    """A batch gives each of its 4 tasks 8 attempts (reward >= 0.55 counts as solved); a task
    solved in more than half of its attempts, or in none, is never drawn again."""
    cfg = load_config(
        None,
        toy_overrides(
            peaked_model_dir,
            tmp_path,
            4,
            "curriculum.enabled=true",
            "curriculum.min_attempts=8",
            "curriculum.max_solve_rate=0.5",
            "curriculum.solved_reward=0.55",
            "task.options.train_size=6",
            "train.max_skipped_batches=20",
        ),
    )
    train_run(cfg)
    batches: dict[int, list] = {}
    for e in EpisodeStore(cfg.run_dir / "episodes.jsonl"):
        batches.setdefault(e.info["batch"], []).append(e)
    seen: dict[str, list[bool]] = {}
    dropped: set[str] = set()
    for number in sorted(batches):
        assert not dropped & {e.task_id for e in batches[number]}, number  # never drawn again
        for e in batches[number]:  # the solve rates the learner knows after this batch
            seen.setdefault(e.task_id, []).append(e.reward >= 0.55)
        dropped |= {
            t for t, s in seen.items() if len(s) >= 8 and (sum(s) / len(s) > 0.5 or not any(s))
        }
    assert dropped  # the rule fired


def test_kl_to_the_base_works_with_full_fine_tuning(
    tiny_model_dir, tmp_path, toy_overrides, train_run, metric_rows
):
    """kl_coef > 0 without LoRA: the reference is a frozen copy of the base model (it used to
    pass validation and fail at the first update)."""
    cfg = load_config(
        None, toy_overrides(tiny_model_dir, tmp_path, 2, "algo.kl_coef=0.5", "train.mini_batches=1")
    )
    assert not cfg.model.lora and train_run(cfg)["steps"] == 2
    rows = metric_rows(tmp_path / "toy")
    assert rows[0]["kl_ref"] == 0.0 < rows[1]["kl_ref"]  # the policy moved away from the base
