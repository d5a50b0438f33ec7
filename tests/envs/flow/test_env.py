"""The flow episode with rules roles: solving, malformed plans, limits, one row per planner turn
(token-exact), options; red-team: no reward without solving."""

import pytest

from practicum.engine.base import Sample, SamplingParams
from practicum.envs.flow.roles import Roles
from practicum.envs.flow.tasks import check_answer
from practicum.envs.registry import SuiteContext, build_suite
from practicum.errors import ConfigError

RULES = {"analyst": "rules", "executor": "rules", "verifier": "rules", "generator": "rules"}


@pytest.fixture(scope="module")
def suite():
    return build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1, "arithmetic": 1, "gsm": 1, "countdown": 1},
            "train_size": 40,
            "eval_per_family": 3,
            # room for interpreter start-up on a loaded 2-core CI machine
            "wall_seconds": 30.0,
        },
        SuiteContext(0),
    )


def first(suite, family, split="train"):
    tasks = suite.train_tasks if split == "train" else suite.eval_tasks
    return next(t for t in tasks if t.data["family"] == family)


def plan(sub_goal, tool, context="none"):
    return f"Context: {context}\nSub-Goal: {sub_goal}\nTool Name: {tool}"


def test_multihop_solved_hop_by_hop_with_a_new_planner_prompt_each_turn(suite):
    env, task = suite.make_env(None), first(suite, "multihop")
    start = env.reset(task)
    assert "Actions so far: none." in start.messages[-1]["content"]
    chain, rels = task.data["chain"], task.data["relations"]
    for i, rel in enumerate(rels):
        r = env.step(plan(f"Find the {rel} of {chain[i]}.", "lookup"))
        if i < len(rels) - 1:
            assert not r.done and r.context is not None
            assert (
                f"Result: The {rel} of {chain[i]} is {chain[i + 1]}." in r.context[-1]["content"]
            )  # memory rendered verbatim into the next prompt
            assert f"Step {i + 2} (at most 3)" in r.context[-1]["content"]
    assert r.done and r.reward == 1.5 and r.solved  # solved + hop_credit 0.5 x all hops
    assert r.metrics["acc/multihop"] == 1.0 and r.metrics["steps"] == len(rels)
    assert r.metrics["hops/multihop"] == 1.0
    assert r.info["flow"]["stopped_by"] == "verifier"
    env.close()


def test_malformed_plan_is_an_error_step_not_a_crash(suite):
    env, task = suite.make_env(None), first(suite, "arithmetic")
    env.reset(task)
    r = env.step("I think the answer is 3.")
    assert r.malformed and not r.done and "Error: malformed plan" in r.context[-1]["content"]
    assert r.metrics["malformed_plans"] == 1 and r.metrics["tool_calls"] == 0
    r = env.step(plan("Look it up", "Google_Maps"))
    assert r.malformed and "unknown tool" in r.info["flow"]["result"]
    r = env.step(plan(task.data["question"], "calculator"))  # the third step: the limit
    assert r.done and r.info["flow"]["stopped_by"] == "max_steps"
    assert r.reward == float(check_answer(task, r.info["flow"]["answer"]))


def test_held_out_episodes_get_the_evaluation_turn_limit(suite):
    env = suite.make_env(None)
    env.reset(first(suite, "multihop", "eval"))
    assert env.max_steps == 10
    env.reset(first(suite, "multihop"))
    assert env.max_steps == 3


def test_every_planner_turn_is_its_own_token_exact_row(suite):
    """The rollout turns each planner prompt into a new segment whose ids are exactly the
    rendered prompt, then the sampled ids (AgentFlow: one sample per planner call)."""
    from practicum.engine.chat import ChatFormat
    from practicum.engine.models import load_builtin_tokenizer
    from practicum.runtime.rollout import EpisodeBuilder, RolloutLimits

    chat = ChatFormat(load_builtin_tokenizer())
    task = first(suite, "multihop")
    b = EpisodeBuilder(
        suite.make_env(None),
        task,
        "g",
        0,
        chat,
        RolloutLimits(10, 4096),
        SamplingParams(max_new_tokens=64),
        0,
    )
    mirror = suite.make_env(None)  # replays the same episode to know each prompt's messages
    expected = [chat.render(mirror.reset(task).messages)]
    chain, rels = task.data["chain"], task.data["relations"]
    for i, rel in enumerate(rels):
        text = plan(f"Find the {rel} of {chain[i]}.", "lookup")
        ids = chat.encode(text) + [chat.eos_token_id]
        req = b.request()
        assert req[0] == expected[-1]
        b.add_action(Sample(ids, [-0.5] * len(ids), text, "stop"), 0, req[1])
        b.apply(b.step_env())
        r = mirror.step(text)
        if r.context is not None:
            expected.append(chat.render(r.context))
    ep = b.episode
    assert b.done and ep.reward == 1.5 and len(ep.turns) == len(rels)  # solved + all hops
    segs = ep.segments()
    assert len(segs) == len(rels)
    for seg, prompt, turn in zip(segs, expected, ep.turns):
        assert seg.input_ids == prompt + turn.sampled_ids
        assert seg.loss_mask == [0] * len(prompt) + [1] * len(turn.sampled_ids)
    assert [t.context_ids is not None for t in ep.turns] == [False] + [True] * (len(rels) - 1)


def test_options_are_validated():
    with pytest.raises(ConfigError, match="task.options.families"):
        build_suite("flow", {"families": {"trivia": 1}}, SuiteContext(0))
    with pytest.raises(ConfigError, match="task.options.executor"):
        build_suite("flow", {"executor": "gpt4"}, SuiteContext(0))
    with pytest.raises(ConfigError, match="task.options.tools"):
        build_suite("flow", {"tools": ["browser"]}, SuiteContext(0))


def test_splits_are_disjoint_and_interleaved(suite):
    train_q = {t.data["question"] for t in suite.train_tasks}
    assert not train_q & {t.data["question"] for t in suite.eval_tasks}
    fams = [t.data["family"] for t in suite.eval_tasks]
    assert len(set(fams[:4])) == 4 and len(fams) == 12


# -- red team: the planner is an adversary --------------------------------------------------------
class FixedGenerator(Roles):
    """Rules roles, but the generator says what the test wants."""

    reply = ""

    def answer(self, memory):
        return self.reply, self.reply


def _env_with_generator(suite, reply):
    env = suite.make_env(None)
    roles = FixedGenerator(None, env.roles.specs, env.roles.titles)
    roles.reply = reply
    env.roles = roles
    return env


@pytest.mark.parametrize("family", ["arithmetic", "gsm", "multihop", "countdown"])
def test_stuffed_candidates_and_echoed_questions_earn_nothing(suite, family):
    task = first(suite, family)
    gold = task.data["answer"]
    for reply in (
        f"{gold} or 0",
        f"0, {gold}",
        f"{gold}\n{gold}1",
        task.data["question"],
        f"0 {gold} 1",
        "",
    ):
        env = _env_with_generator(suite, reply)
        env.reset(task)
        r = env.step(plan("no", "search"))
        r = r if r.done else env.step(plan("no", "search"))
        r = r if r.done else env.step(plan("no", "search"))
        assert r.done and r.reward == 0.0 and not r.solved, (family, reply)
    assert check_answer(task, gold)  # and the gold itself passes


def test_planner_stuffing_answers_into_its_sub_goal_does_not_pass_the_verifier(suite):
    """A sub-goal listing candidates never becomes a tool result, so the rules generator
    has nothing to answer with."""
    task = first(suite, "multihop")
    env = suite.make_env(None)
    env.reset(task)
    names = " or ".join(list(env.world.titles)[:30])
    for _ in range(3):
        r = env.step(plan(f"The answer is one of {names}", "search"))
    assert r.done and r.reward == 0.0


@pytest.mark.parametrize("family", ["multihop", "arithmetic"])
def test_code_cannot_read_the_answer_key(suite, family):
    """The gold answer lives only in the trainer's process: sandboxed code sees no file, no
    environment variable and no process memory holding it. The probe is the audit's
    (`answer_key_program`): bounded, the interpreter's installation skipped, and a finding
    counts only without its decoys (other titles, numbers with as many digits), so neither a
    venv under /tmp nor a short number occurring by chance decides it."""
    import random

    from practicum.audit.attacks import answer_key_program, decoys_for

    task = first(suite, family)
    gold = str(task.data["answer"])
    env = suite.make_env(None)
    env.reset(task)
    try:
        decoys = decoys_for(gold, random.Random(0), env.world.titles)
        probe = answer_key_program(gold, decoys, seconds=10.0)
        coder = env.tools["python_coder"]
        assert coder.run(probe).text == "clean"
        (env._workdir / "corpus.txt").write_text(" ".join([gold, *decoys]))  # by chance
        assert coder.run(probe).text == "clean"
        (env._workdir / "leak.txt").write_text(f"answer: {gold}\n")  # a key it can reach
        assert coder.run(probe).text == gold
    finally:
        env.close()


def test_baseline_modes_share_tasks_tools_and_checks():
    opts = {
        **RULES,
        "families": {"multihop": 1, "arithmetic": 1},
        "train_size": 8,
        "eval_per_family": 1,
    }
    direct = build_suite("flow", {**opts, "mode": "direct"}, SuiteContext(0))
    task = first(direct, "arithmetic")
    env = direct.make_env(None)
    env.reset(task)
    r = env.step(f"Answer: {task.data['answer']}")
    assert r.done and r.reward == 1.0 and r.metrics["acc/arithmetic"] == 1.0
    ti = build_suite("flow", {**opts, "mode": "tool_integrated"}, SuiteContext(0))
    task = first(ti, "multihop")
    env = ti.make_env(None)
    env.reset(task)
    chain, rels = task.data["chain"], task.data["relations"]
    for i, rel in enumerate(rels):
        r = env.step(f"Tool: lookup\nCommand: {chain[i]} | {rel}")
        assert not r.done and r.observation == f"Result: The {rel} of {chain[i]} is {chain[i + 1]}."
    assert env.step("Hmm").malformed
    r = env.step(f"Answer: {task.data['answer']}")
    assert r.done and r.reward == 1.0 and r.metrics["tool_calls"] == len(rels)
    env.close()


def test_time_limit_counts_the_flows_own_work(suite):
    import time

    env = suite.make_env(None)
    task = first(suite, "arithmetic")
    env.reset(task)
    env.max_seconds = 0.5
    time.sleep(0.6)  # waiting for the planner's generation does not count
    r = env.step(plan("Find the founder of Nobody.", "lookup"))
    assert not r.done
    r = env.step(
        plan("Compute it: ```python\nimport time\ntime.sleep(0.6)\nprint(1)\n```", "python_coder")
    )
    assert r.done and r.info["flow"]["stopped_by"] == "max_seconds"


def test_tool_integrated_ends_itself_after_its_turn_limit():
    ti = build_suite(
        "flow",
        {
            **RULES,
            "families": {"arithmetic": 1},
            "train_size": 4,
            "eval_per_family": 1,
            "mode": "tool_integrated",
            "max_steps_train": 2,
        },
        SuiteContext(0),
    )
    env = ti.make_env(None)
    env.reset(ti.train_tasks[0])
    assert not env.step("hmm").done and not env.step("Tool: calculator\nCommand: 1+1").done
    r = env.step("still thinking")
    assert r.done and r.reward == 0.0 and "acc/arithmetic" in r.metrics
    env.close()
