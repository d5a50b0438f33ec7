"""Whole runs of the example agent (examples/openai_agent.py, plain `openai` client) through
the endpoint: every trained token is what the engine saw and sampled, and the policy learns."""

import json

import pytest

from practicum.agent.exactness import check_exactness
from practicum.config import load_config
from practicum.runtime.train import run_training
from practicum.store import EpisodeStore, read_ledger

from .conftest import agent_overrides, metric_rows

pytestmark = pytest.mark.slow


def test_sixteen_agents_at_once_are_trained_token_exactly(peaked_model_dir, tmp_path):
    """16 agents side by side (16 async actors), 7 calls each (112 trained calls): every
    trained turn's context is the prompt the engine got (the request log, written apart from
    the episodes), each turn carries the version that sampled it, and the learner's log-probs
    are the sampler's."""
    cfg = load_config(
        None,
        agent_overrides(
            peaked_model_dir,
            tmp_path,
            "rollout.group_size=4",
            "rollout.tasks_per_step=4",
            "train.steps=1",
            "train.lr=1e-3",
            "rollout.agent.request_log=true",
            "runtime.mode=async",
            "runtime.num_actors=16",
            "runtime.max_staleness=0",
            turns=7,
            max_tokens=6,
        ),
    )
    run_training(cfg, progress=False)
    run = tmp_path / "toy"
    stored = list(EpisodeStore(run / "episodes.jsonl"))
    (batch,) = read_ledger(run / "consumed.jsonl")
    episodes = [stored[pos] for pos, _ in batch["trained"]]  # async: what the step took
    assert len(episodes) >= 16 and not any(e.failure for e in stored), [e.failure for e in stored]
    assert {t.policy_version for e in episodes for t in e.turns} == {0}
    assert sum(len(e.turns) for e in episodes) == 7 * len(episodes) >= 112
    # every call after an episode's first continued its row: one segment per episode
    assert all(e.metrics["agent_continued"] == 6 and len(e.segments()) == 1 for e in episodes)
    report = check_exactness(episodes, run / "agent_requests.jsonl")
    assert report.ok and report.trained_turns == 7 * len(episodes), report.problems[:3]
    (row,) = metric_rows(run)
    assert row["train_tokens"] == sum(e.num_sampled for e in episodes)
    assert row["logprob_gap_max"] < 1e-3  # the learner scores exactly what was sampled
    gap = {"max": row["logprob_gap_max"], "mean": row["logprob_gap"]}
    (tmp_path / "gap.json").write_text(json.dumps(gap))
    print(f"\nlearner vs sampler log-prob gap over {7 * len(episodes)} calls: {gap}")


def test_the_example_agent_learns_the_toy_task_and_an_lr0_control_does_not(
    peaked_model_dir, tmp_path
):
    """Same seeds, same agent: with lr 1e-2 the held-out reward rises; with lr 0 nothing
    changes (the first batches are identical: same weights, same seeds)."""
    runs = {}
    for lr in (1e-2, 0):
        cfg = load_config(
            None,
            agent_overrides(
                peaked_model_dir,
                tmp_path / f"lr{lr}",
                "rollout.group_size=4",
                "rollout.tasks_per_step=2",
                "train.steps=4",
                f"train.lr={lr}",
                "task.options.eval_size=4",
            ),
        )
        summary = run_training(cfg, progress=False)
        runs[lr] = (summary, [r["reward_mean"] for r in metric_rows(tmp_path / f"lr{lr}" / "toy")])
    (trained, curve), (control, flat) = runs[1e-2], runs[0]
    print(
        f"\ntrain reward per step: lr 1e-2 {curve}, lr 0 {flat}; held-out before "
        f"{trained['eval_before']['reward_mean']:.3f}, after: lr 1e-2 "
        f"{trained['eval_after']['reward_mean']:.3f}, lr 0 "
        f"{control['eval_after']['reward_mean']:.3f}"
    )
    assert curve[0] == flat[0]  # the same first batch
    assert control["eval_after"]["reward_mean"] == control["eval_before"]["reward_mean"]
    assert trained["eval_after"]["reward_mean"] > control["eval_after"]["reward_mean"] + 0.15
    assert sum(curve[-2:]) / 2 > sum(flat[-2:]) / 2 + 0.1, (curve, flat)
