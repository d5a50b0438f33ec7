"""The scripted planner demonstrations (`envs/flow/demo.py`, the data of the flow SFT warm
start): they solve training tasks through the real env with rules roles, every reply fits the
planner grammar, held-out tasks are never demonstrated, and an unscripted family earns no
demonstration."""

import pytest

from practicum.envs.flow.demo import Demonstrator, steps_done
from practicum.envs.registry import SuiteContext, build_suite
from tests.envs.grammar_match import matches

RULES = {"analyst": "rules", "executor": "rules", "verifier": "rules", "generator": "rules"}


@pytest.fixture(scope="module")
def suite():
    return build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 2, "arithmetic": 1, "gsm": 1},
            "train_size": 24,
            "eval_per_family": 2,
            "wall_seconds": 30.0,
        },
        SuiteContext(0),
    )


def act_out(suite, task):
    """Run one episode with the demonstrator's replies; (last result, replies)."""
    env = suite.make_env(None)
    start = env.reset(task)
    act = suite.demonstrator(task.task_id)
    messages, replies = list(start.messages), []
    grammar = start.grammar
    try:
        for _ in range(env.max_steps):
            reply = act(messages)
            assert matches(grammar, reply), reply
            replies.append(reply)
            r = env.step(reply)
            if r.done:
                return r, replies
            messages, grammar = list(r.context), r.grammar or grammar
    finally:
        env.close()
    raise AssertionError("the episode did not end within its step limit")


def test_demonstrations_solve_multihop_and_arithmetic_training_tasks(suite):
    tasks = [t for t in suite.train_tasks if t.data["family"] in ("multihop", "arithmetic")]
    assert {t.data["family"] for t in tasks} == {"multihop", "arithmetic"}
    scripted = 0
    for task in tasks:
        result, replies = act_out(suite, task)
        if "Tool Name: search" in replies[0]:  # an expression too long for the grammar's cap
            assert task.data["family"] == "arithmetic" and not result.solved
            continue
        scripted += task.data["family"] == "arithmetic"
        assert result.solved, (task.data["question"], replies)
        if task.data["family"] == "multihop":  # one lookup per hop, each naming its entity
            assert result.metrics["hops/multihop"] == 1.0
            assert len(replies) == len(task.data["relations"])
            for reply, entity in zip(replies, task.data["chain"]):
                assert f" of {entity}." in reply
    assert scripted >= 3


def test_a_later_hop_takes_its_context_from_the_previous_result(suite):
    task = next(t for t in suite.train_tasks if t.data["family"] == "multihop")
    _, replies = act_out(suite, task)
    assert replies[0].startswith("Context: none\n")
    assert task.data["chain"][1] in replies[1].split("\n")[0]  # Context: ... is <entity 1>.


def test_held_out_tasks_are_never_demonstrated(suite):
    for task in suite.eval_tasks:
        with pytest.raises(KeyError, match="not a training task"):
            suite.demonstrator(task.task_id)


def test_a_family_without_a_script_is_not_solved_so_sft_keeps_nothing_of_it(suite):
    task = next(t for t in suite.train_tasks if t.data["family"] == "gsm")
    result, _ = act_out(suite, task)
    assert not result.solved


def test_steps_done_reads_the_memory_of_the_planner_prompt():
    prompt = (
        "Query: q\nAction Step 1:\n  Tool: lookup\n  Sub-Goal: s\n  Command: c\n"
        "  Result: The founder of A is B.\nStep 2 (at most 3). Plan the next step."
    )
    assert steps_done(
        [
            {"role": "user", "content": "Query: q\nActions so far: none."},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": prompt},
        ]
    ) == (1, "The founder of A is B.")
    assert steps_done([]) == (0, "")
    assert Demonstrator([])  # knows nothing: every task id is refused
    with pytest.raises(KeyError):
        Demonstrator([])("train/multihop/0")
