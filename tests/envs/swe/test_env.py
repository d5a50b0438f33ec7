"""The swe environment on the hand-made toy repository: scripted episodes (real sandbox, real
FULL-rule grading), the package split, kill, and one episode with the real SmolLM2."""

from __future__ import annotations

import threading
import time

import pytest

from practicum.envs.base import Task
from practicum.envs.registry import SuiteContext, build_suite
from practicum.envs.swe.env import SweOptions, split_instances
from practicum.envs.swe.instance import load_instances
from practicum.envs.swe.toy_repo import write_toy_instance

FIX = "<edit>calc/ops.py\n<old>\n    return a - b\n</old>\n<new>\n    return a + b\n</new>\n</edit>"


@pytest.fixture
def suite_file(tmp_path):
    write_toy_instance(tmp_path, repos={"toy__other-1": "toy/other"})
    return tmp_path / "toy.jsonl"


def make_env(suite_file, max_turns=6, **opts):
    suite = build_suite(
        "swe",
        {"instances": str(suite_file), "held_out_packages": ["other"], **opts},
        SuiteContext(max_turns=max_turns),
    )
    return suite, suite.make_env(None)


def test_suite_splits_by_package(suite_file):
    suite, _ = make_env(suite_file)
    assert [t.task_id for t in suite.train_tasks] == ["toy__calc-1"]
    assert [t.task_id for t in suite.eval_tasks] == ["toy__other-1"]
    insts = load_instances(suite_file)
    train, held = split_instances(insts, SweOptions(held_out_packages=["calc"], tiers=None))
    assert {i.repo for i in held} == {"toy/calc"} and {i.repo for i in train} == {"toy/other"}


def test_gold_fix_then_submit_is_resolved(suite_file):
    _, env = make_env(suite_file)
    start = env.reset(Task("toy__calc-1"), 0)
    assert "add(2, 3) returns -1" in start.messages[-1]["content"]
    assert "</bash>" in start.stop_strings and "<bash>" not in start.stop_strings
    r = env.step(FIX)
    assert not r.done and "return a + b" in r.observation
    r = env.step("<bash>python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1</bash>")
    assert "3 passed" in r.observation
    r = env.step("<submit></submit>")
    assert r.done and r.solved and r.reward == 1.0
    assert r.metrics["resolved"] == 1.0 and r.metrics["turns"] == 3.0
    assert r.metrics["patch_applied"] == 1.0 and r.metrics["submitted"] == 1.0
    env.close()


def test_no_change_is_not_resolved_and_malformed_turns_are_flagged(suite_file):
    _, env = make_env(suite_file)
    env.reset(Task("toy__calc-1"), 0)
    r = env.step("The bug is obvious.")
    assert r.malformed and not r.done and "<bash>" in r.observation
    r = env.step("<edit>calc/ops.py\n<old>\nreturn a * b\n</old>\n<new>\nx\n</new>\n</edit>")
    assert not r.malformed and "not found" in r.observation
    r = env.step("<edit>calc/ops.py\n<old>\n    return \n</old>\n<new>\nx\n</new>\n</edit>")
    assert "occurs 2 times" in r.observation
    assert r.metrics["tool_errors"] == 2.0 and r.metrics["malformed_turns"] == 1.0
    r = env.step("<submit/>")
    assert r.done and r.reward == 0.0 and r.solved is False
    env.close()


def test_last_turn_grades_the_diff_without_submit(suite_file):
    _, env = make_env(suite_file, max_turns=2)
    env.reset(Task("toy__calc-1"), 0)
    assert not env.step(FIX).done
    r = env.step("<bash>echo still working</bash>")
    assert r.done and r.solved and r.metrics["submitted"] == 0.0


def test_observations_are_truncated_per_turn_and_per_episode(suite_file):
    _, env = make_env(suite_file, obs_chars=300, episode_obs_chars=700)
    env.reset(Task("toy__calc-1"), 0)
    sizes = [len(env.step("<bash>seq 1 5000</bash>").observation) for _ in range(4)]
    assert sizes[0] <= 300 and "characters cut" in env.step("<bash>seq 1 999</bash>").observation
    assert sum(sizes[:2]) <= 700 and sizes[3] <= 200 + 1
    env.close()


def test_per_command_timeout(suite_file):
    _, env = make_env(suite_file, command_seconds=1.0)
    env.reset(Task("toy__calc-1"), 0)
    t0 = time.monotonic()
    r = env.step("<bash>sleep 30</bash>")
    assert time.monotonic() - t0 < 10 and "timed out" in r.observation
    env.close()


def test_kill_cancels_the_running_command(suite_file):
    _, env = make_env(suite_file, command_seconds=60)
    env.reset(Task("toy__calc-1"), 0)
    threading.Timer(0.5, env.kill).start()
    t0 = time.monotonic()
    r = env.step("<bash>sleep 50</bash>")
    assert time.monotonic() - t0 < 10 and "cancelled" in r.observation
    env.close()


@pytest.mark.slow
@pytest.mark.real_model
def test_real_smollm2_episode_is_token_exact(suite_file, smollm2_dir):
    """SmolLM2 plays a short episode through the env; the training row is the prompt, every
    sampled turn and every observation's ids, and the trainer's log-probs of the sampled
    tokens on that row match the sampler's (nothing was re-tokenized)."""
    import torch

    from practicum.batch import Row, train_rows
    from practicum.engine.base import SamplingParams
    from practicum.engine.chat import ChatFormat
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.engine.server import GenerationServer
    from practicum.learner.rows import token_batch
    from practicum.runtime.rollout import EpisodeBuilder, RolloutLimits, run_episode

    trainable, sampler = load_hf_engine(
        PolicyConfig(model=str(smollm2_dir), dtype="float32", seed=0)
    )
    server = GenerationServer(sampler).start()
    try:
        chat = ChatFormat(trainable.tokenizer)
        _, env = make_env(suite_file, max_turns=2)
        b = EpisodeBuilder(
            env,
            Task("toy__calc-1"),
            "g",
            0,
            chat,
            RolloutLimits(2, 2048),
            SamplingParams(temperature=1.0, max_new_tokens=24),
            run_seed=1,
        )
        ep = run_episode(b, server.generate)
    finally:
        server.stop()
    assert ep.failure is None and ep.turns and ep.reward in (0.0, 1.0)
    assert ep.metrics["turns"] == len(ep.turns)  # the env saw every turn
    row = ep.segments()[0]
    expected = list(ep.prompt_ids)
    for t in ep.turns:
        expected += t.sampled_ids + t.observation_ids
    assert row.input_ids == expected
    for t in ep.turns[:-1]:
        assert t.observation_ids and t.observation_text in chat.tokenizer.decode(t.observation_ids)
    # the turns were sampled under the env's tool-call grammar: the learner replays it
    assert all(t.grammar for t in ep.turns)
    zeros = [torch.zeros(len(ep.turns))]
    tb = token_batch(
        train_rows([Row(0, row)], zeros, zeros), trainable.pad_id, "cpu", trainable.tokenizer
    )
    assert tb.allowed is not None
    with torch.no_grad():
        logp = trainable.token_logprobs(tb.input_ids, tb.attention_mask, allowed=tb.allowed)[0]
    mask = torch.tensor(row.loss_mask, dtype=torch.bool)
    gap = (logp[mask] - torch.tensor(row.behaviour_logprobs)[mask]).abs().max().item()
    assert gap < 0.05, gap
