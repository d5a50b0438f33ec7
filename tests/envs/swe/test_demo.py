"""The scripted demonstrator of `practicum sft`: it knows the training split only, its
actions fit the tool grammar and the turn budget of configs/swe.yaml, and its episodes earn
reward only through the real tests (a wrong patch, written the same way, resolves nothing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from practicum.engine.models import load_builtin_tokenizer
from practicum.envs.base import Task
from practicum.envs.registry import SuiteContext, build_suite
from practicum.envs.swe.demo import Demonstrator, Hunk, minimal_edit, parse_hunks
from practicum.envs.swe.env import package
from practicum.envs.swe.grammar import tool_grammar
from tests.envs.grammar_match import matches

SWE_YAML = yaml.safe_load((Path(__file__).parents[3] / "configs" / "swe.yaml").read_text())
OPTIONS = SWE_YAML["task"]["options"]


@pytest.fixture(scope="module")
def suite():
    return build_suite("swe", OPTIONS, SuiteContext(max_turns=SWE_YAML["rollout"]["max_turns"]))


def test_the_demonstrator_never_sees_a_held_out_package(suite):
    demo = suite.demonstrator
    assert set(demo.instances) == {t.task_id for t in suite.train_tasks}
    assert not {package(i) for i in demo.instances.values()} & set(OPTIONS["held_out_packages"])
    for task in suite.eval_tasks:
        with pytest.raises(KeyError, match="not a training task"):
            demo(task.task_id)


def run(suite, task_id, actions):
    env = suite.make_env(None)
    env.reset(Task(task_id), 0)
    try:
        for a in actions:
            r = env.step(a)
            if r.done:
                return r
    finally:
        env.close()
    return r


def test_demonstrations_fit_the_grammar_and_budget_and_resolve_by_the_tests(suite):
    tok = load_builtin_tokenizer()
    grammar = tool_grammar()  # swe.yaml keeps the grammar caps' defaults
    budget = SWE_YAML["sampling"]["max_new_tokens"]
    for task in suite.train_tasks:
        actions = suite.demonstrator.actions(task.task_id)
        assert len(actions) <= SWE_YAML["rollout"]["max_turns"] + 1
        for a in actions:
            assert matches(grammar, a), a
            assert len(tok.encode(a, add_special_tokens=False)) < budget, a
        r = run(suite, task.task_id, actions)
        assert r.done and r.solved and r.metrics["resolved"] == 1.0, task.task_id


def test_a_wrong_patch_demonstrated_the_same_way_earns_nothing(suite):
    """The demonstrator's reward is the environment's verdict: a script written from another
    task's fix (same search/view/edit/submit shape) resolves nothing."""
    insts = suite.demonstrator.instances
    a, b = next(
        (x, y)
        for x in insts
        for y in insts  # two tasks of one file
        if x != y and parse_hunks(insts[x].patch)[0].path == parse_hunks(insts[y].patch)[0].path
    )
    wrong = Demonstrator([replace(insts[a], patch=insts[b].patch)])
    actions = wrong.actions(a)
    assert actions[-1] == "<submit></submit>"
    r = run(suite, a, actions)
    assert r.done and not r.solved and r.reward == 0.0


def test_the_edit_widens_its_context_until_the_old_block_is_unique():
    patch = (
        "--- a/m.py\n+++ b/m.py\n@@ -1,5 +1,5 @@\n def f():\n     x = 1\n-    return x\n"
        "+    return -x\n \n"
    )
    [h] = parse_hunks(patch)
    assert h == Hunk(
        "m.py",
        1,
        [
            (" ", "def f():"),
            (" ", "    x = 1"),
            ("-", "    return x"),
            ("+", "    return -x"),
            (" ", ""),
        ],
    )
    assert minimal_edit(h, "def f():\n    x = 1\n    return x\n") == (
        "    return x",
        "    return -x",
    )
    twice = "def g():\n    return x\ndef f():\n    x = 1\n    return x\n"
    assert minimal_edit(h, twice) == ("    x = 1\n    return x", "    x = 1\n    return -x")
