"""A flow episode on the real SmolLM2-135M-Instruct: the planner is the policy, the executor,
verifier and generator are the same weights with the adapter off, through the model service."""

import pytest

from practicum.engine.base import SamplingParams
from practicum.envs.registry import SuiteContext, build_suite


@pytest.mark.slow
@pytest.mark.real_model
def test_flow_episode_with_frozen_roles_on_the_base_model(smollm2_dir):
    from practicum.engine.chat import ChatFormat
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.engine.server import GenerationServer
    from practicum.engine.service import ModelService
    from practicum.runtime.rollout import EpisodeBuilder, RolloutLimits, run_episode

    trainable, sampler = load_hf_engine(PolicyConfig(model=str(smollm2_dir), dtype="float32"))
    server = GenerationServer(sampler).start()
    try:
        chat = ChatFormat(trainable.tokenizer)
        service = ModelService(server, chat)
        suite = build_suite(
            "flow",
            {
                "families": {"arithmetic": 1},
                "train_size": 4,
                "eval_per_family": 1,
                "max_steps_train": 2,
                "analyst": "rules",
                "executor": "base",
                "verifier": "base",
                "generator": "base",
                "executor_tokens": 24,
                "verifier_tokens": 24,
                "generator_tokens": 16,
            },
            SuiteContext(0),
        )
        task = suite.train_tasks[0]
        b = EpisodeBuilder(
            suite.make_env(service),
            task,
            "g",
            0,
            chat,
            RolloutLimits(2, 1200),
            SamplingParams(temperature=0.0, max_new_tokens=40),
            0,
        )
        ep = run_episode(b, lambda ids, params, seed: server.generate(ids, params, seed=seed))
    finally:
        server.stop()
    assert ep.failure is None and b.done and 1 <= len(ep.turns) <= 2
    flows = [t.info["flow"] for t in ep.turns]
    # the few-shot planner writes a well-formed plan; the base executor wrote a command
    assert not flows[0]["plan"]["malformed"], ep.turns[0].action_text
    assert flows[0]["executor"].strip() and flows[0]["command"]
    assert "generator" in flows[-1] and flows[-1]["answer"] is not None
    assert ep.reward == float(flows[-1]["correct"])
    assert len(ep.segments()) == len(ep.turns)
