"""The planner grammar, checked with llguidance on SmolLM2's tokens: honest plans (the prompt's
own worked examples among them) match; prose, unknown tools, the memory's step format and
run-on fields do not. Every planner turn of the env carries it."""

import pytest

from practicum.envs.flow import prompts
from practicum.envs.flow.grammar import planner_grammar
from practicum.envs.flow.parsing import parse_plan
from practicum.envs.registry import SuiteContext, build_suite
from tests.envs.grammar_match import compile_error, matches

TOOLS = ["python_coder", "calculator", "search", "lookup"]
G = planner_grammar(TOOLS, field_chars=100)


def test_the_grammar_compiles():
    assert compile_error(G) == ""


@pytest.mark.parametrize(
    "text",
    [
        "Context: none\nSub-Goal: Find the founder of Velor Works.\nTool Name: lookup",
        "Context: The founder of Velor Works is Kamir Sa.\nSub-Goal: Find the birthplace of "
        "Kamir Sa.\nTool Name: lookup",
        "Context: none\nSub-Goal: print(sum(range(10)))\nTool Name: python_coder",
        *[
            m["content"]
            for m in prompts.PLANNER_EXAMPLES + prompts.DOCUMENT_EXAMPLES
            if m["role"] == "assistant"
        ],
    ],
)
def test_honest_plans_match_and_parse(text):
    assert matches(G, text)
    assert not parse_plan(text, TOOLS).malformed


@pytest.mark.parametrize(
    "text",
    [
        "I think the answer is Kamir Sa.",
        "Context: none\nSub-Goal: Find it.\nTool Name: Google_Search",  # not a tool of the list
        "Context: none\nSub-Goal: Find it.\nTool Name: look",  # incomplete
        "Tool: lookup\nSub-Goal: Find the founder of Velor Works.\nCommand: Velor Works | founder",
        "Context: none\nSub-Goal: " + "x" * 101 + "\nTool Name: lookup",  # over the cap
        "Context: " + "a b " * 20 + "\nSub-Goal: Find it.\nTool Name: lookup",  # over 24 tokens
        "Context: none\nSub-Goal: \nTool Name: lookup",  # empty field
        "Context: none\nSub-Goal: a\nb\nTool Name: lookup",  # two-line field
        "Context: none\nSub-Goal: Find it.\nTool Name: lookup\nCommand: x",  # runs on
    ],
)
def test_bad_plans_do_not_match(text):
    assert not matches(G, text)


def test_every_planner_turn_carries_the_grammar_of_its_tools():
    suite = build_suite(
        "flow",
        {
            "analyst": "rules",
            "executor": "rules",
            "verifier": "rules",
            "generator": "rules",
            "families": {"multihop": 1},
            "train_size": 2,
            "eval_per_family": 1,
            "tools": ["search", "lookup"],
        },
        SuiteContext(0),
    )
    env, task = suite.make_env(None), suite.train_tasks[0]
    start = env.reset(task)
    assert start.grammar == planner_grammar(["search", "lookup"], 100)
    assert not matches(start.grammar, "Context: none\nSub-Goal: 2+2\nTool Name: calculator")
    r = env.step("Context: none\nSub-Goal: nothing\nTool Name: search")
    assert not r.done and r.context is not None and r.grammar == start.grammar
    env.close()
    off = build_suite(
        "flow",
        {
            "analyst": "rules",
            "executor": "rules",
            "verifier": "rules",
            "generator": "rules",
            "families": {"multihop": 1},
            "train_size": 2,
            "eval_per_family": 1,
            "planner_grammar_chars": None,
        },
        SuiteContext(0),
    )
    env = off.make_env(None)
    assert env.reset(off.train_tasks[0]).grammar is None
    env.close()
