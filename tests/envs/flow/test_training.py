"""Whole Flow-GRPO runs on the tiny model, sync and async: one training row per planner turn,
every turn of an episode carries its trajectory's reward, advantages normalised over all
turn-samples of a task's rollouts (arXiv 2510.05592)."""

import itertools
import json

import pytest
import torch

from practicum.batch import train_rows, training_rows, turn_advantages, turn_duration_weights
from practicum.config import load_config
from practicum.learner.rows import token_batch
from practicum.store import EpisodeStore

SMALL = [
    "task.name=flow",
    "task.options.families={arithmetic: 1}",
    "task.options.tools=[calculator, lookup]",
    "task.options.train_size=16",
    "task.options.eval_per_family=1",
    "task.options.max_steps_train=2",
    "task.options.max_steps_eval=1",
    "task.options.analyst=rules",
    "task.options.executor=rules",
    "task.options.verifier=rules",
    "task.options.generator=rules",
    "algo.advantage=flow_grpo",
    "algo.kl_coef=0.001",
    "algo.clip_high=0.3",
    "algo.dynamic_sampling=false",
    "algo.mask_overlong=false",
    "rollout.group_size=2",
    "rollout.tasks_per_step=2",
    "rollout.max_turns=2",
    "rollout.max_seq_len=900",
    "sampling.max_new_tokens=6",
    "train.steps=2",
    "train.micro_batch_size=8",
    "train.warmup_steps=0",
    "eval.every=0",
    "model.dtype=float32",
    "runtime.num_actors=4",
]


@pytest.fixture
def alternating_reward(monkeypatch):
    """The tiny random model never writes a plan, so every answer would be wrong: grade by a
    counter instead (1, 0, 1, ...) so groups hold both outcomes and advantages are non-zero."""
    counters: dict[str, itertools.count] = {}  # per task: a group's members always differ,
    monkeypatch.setattr(  # whatever order async episodes finish in
        "practicum.envs.flow.env.check_answer",
        lambda task, answer: next(counters.setdefault(task.task_id, itertools.count())) % 2 == 0,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, packed",
    [("sync", False), ("async", False), ("sync", True)],
    ids=["sync", "async", "sync-packed"],
)
def test_flow_grpo_run_trains_one_row_per_planner_turn(
    tiny_model_dir, tmp_path, alternating_reward, mode, packed
):
    """packed: micro-batches under a token budget, run packed, grammar masks replayed (the
    planner's turns are sampled under its grammar)."""
    from practicum.runtime.train import run_training

    budget = ["train.max_tokens_per_micro_batch=1500"] if packed else []
    cfg = load_config(
        None,
        [
            *SMALL,
            f"model.model={tiny_model_dir}",
            f"run.out_dir={tmp_path}",
            f"run.name={mode}",
            f"runtime.mode={mode}",
            *budget,
        ],
    )
    summary = run_training(cfg, progress=False)
    assert summary["steps"] == 2 and summary["mode"] == mode
    episodes = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    assert len(episodes) >= 8
    for e in episodes:
        assert 1 <= len(e.turns) <= 2 and e.reward in (0.0, 1.0)
        assert len(e.segments()) == len(e.turns)  # every planner turn its own row
        assert all(t.context_ids is not None for t in e.turns[1:])
        assert all("flow" in t.info for t in e.turns)
    rows = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "loss" in r]
    assert len(trained) == 2 and any(r["grad_norm"] > 0 for r in trained)
    assert all(r["kl_ref"] >= 0 for r in trained)

    # the advantages the learner computes for a group, against the formula by hand
    group = [e for e in episodes if e.group_id == episodes[0].group_id]
    per_turn = [e.reward for e in group for _ in e.turns]
    mean = sum(per_turn) / len(per_turn)
    std = (sum((r - mean) ** 2 for r in per_turn) / (len(per_turn) - 1)) ** 0.5
    adv = turn_advantages(group, torch.tensor([e.reward for e in group]), cfg.algo)
    for e, a in zip(group, adv):
        expect = 0.0 if std == 0 else (e.reward - mean) / (std + 1e-6)
        assert torch.allclose(a, torch.full((len(e.turns),), expect), atol=1e-5)


def test_rows_carry_their_own_turns_advantage():
    """Two episodes of one task, 2 turns (reward 1) and 1 turn (reward 0): turn rewards
    [1, 1, 0], mean 2/3, std sqrt(1/3): advantages +0.5774, +0.5774, -1.1547, each on the
    sampled tokens of its own row."""
    from practicum.config import AlgoConfig
    from practicum.episode import Episode, Turn

    def ep(reward, n):
        turns = [
            Turn([10 + k, 11 + k], [-1.0, -1.0], 0, context_ids=[1, 2] if k else None)
            for k in range(n)
        ]
        return Episode("t", "g", [1, 2, 3], turns, reward=reward)

    eps = [ep(1.0, 2), ep(0.0, 1)]
    algo = AlgoConfig(advantage="flow_grpo")
    adv = turn_advantages(eps, torch.tensor([1.0, 0.0]), algo)
    s = (1 / 3) ** 0.5
    assert torch.allclose(
        torch.cat(adv), torch.tensor([(1 / 3) / s, (1 / 3) / s, -(2 / 3) / s]), atol=1e-4
    )
    rows = training_rows(eps, [True, True])
    assert [len(r.segment.input_ids) for r in rows] == [5, 4, 5]
    tb = token_batch(train_rows(rows, adv, turn_duration_weights(eps, algo)), 0)
    # row b, sampled positions only: each row's tokens carry its own turn's advantage
    got = [x for b in range(3) for x in tb.advantages[b][tb.loss_mask[b] > 0].tolist()]
    assert got == pytest.approx([0.5774] * 4 + [-1.1547] * 2, abs=1e-3)
    assert tb.advantages[tb.loss_mask == 0].abs().sum() == 0  # prompts carry nothing
