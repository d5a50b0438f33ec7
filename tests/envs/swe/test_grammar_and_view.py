"""The SWE tool-call grammar (checked with llguidance on SmolLM2's tokens: honest calls match,
run-on paths and searches and prose do not, every accepted call parses) and <view>'s
resolution of pytest node ids and unique basenames."""

from __future__ import annotations

import pytest

from practicum.envs.base import Task
from practicum.envs.registry import SuiteContext, build_suite
from practicum.envs.swe.grammar import GrammarCaps, tool_grammar
from practicum.envs.swe.prompts import EXAMPLE_MESSAGES
from practicum.envs.swe.tools import parse_action
from practicum.envs.swe.toy_repo import write_toy_instance
from tests.envs.grammar_match import compile_error, matches

G = tool_grammar(
    GrammarCaps(
        path_chars=80,
        search_chars=60,
        command_chars=200,
        edit_tokens=80,
        path_tokens=24,
        search_tokens=24,
        command_tokens=64,
    )
)


def test_the_grammar_compiles():
    assert compile_error(G) == ""


@pytest.mark.parametrize(
    "call",
    [
        "<search>def camelize</search>",
        "<view>toolz/itertoolz.py 10-40</view>",
        "<view>test_inflection.py::test_pluralize_plural[cow-kine]</view>",
        "<bash>python -m pytest -q tests/test_ops.py</bash>",
        "<edit>calc/ops.py\n<old>\n    return a < b\n</old>\n<new>\n    return a <= b\n</new>\n"
        "</edit>",
        "<edit>calc/ops.py\n<old>\n    if a:\n\n        x = 1\n</old>\n<new>\n\n</new>\n</edit>",
        "<submit></submit>",
        *[m["content"] for m in EXAMPLE_MESSAGES if m["role"] == "assistant"],
    ],
)
def test_honest_calls_match_and_parse(call):
    assert matches(G, call)
    parse_action(call)  # raises on a call the environment could not use


@pytest.mark.parametrize(
    "call",
    [
        "Sure! Let me look. <search>add</search>",  # prose first
        "<search>" + "x" * 61 + "</search>",  # search over the cap
        "<search>" + "a." * 25 + "</search>",  # 50 chars, over 24 tokens
        "<view>" + "pkg/" * 25 + "mod.py</view>",  # path over the cap
        "<view>calc/ops.py is the file to view</view>",  # a sentence, not a path
        "<search>two\nlines</search>",
        "<edit>calc/ops.py\n<old>\n" + "x = 1\n" * 80 + "</old>\n<new>\ny\n</new>\n</edit>",
        "```python\nreturn a + b\n```",
        "<submit></submit> and more",
    ],
)
def test_bad_calls_do_not_match(call):
    assert not matches(G, call)


@pytest.fixture
def env(tmp_path):
    write_toy_instance(tmp_path, repos={"toy__other-1": "toy/other"})
    suite = build_suite(
        "swe",
        {"instances": str(tmp_path / "toy.jsonl"), "held_out_packages": ["other"]},
        SuiteContext(max_turns=8),
    )
    env = suite.make_env(None)
    yield env
    env.close()


def test_every_turn_carries_the_grammar(env):
    start = env.reset(Task("toy__calc-1"), 0)
    assert start.grammar == G
    assert env.step("<view>calc/ops.py</view>").grammar == G
    assert env.step("no tool at all").grammar == G  # a malformed turn too


def test_view_resolves_a_pytest_node_id_from_the_tests_definition(env):
    env.reset(Task("toy__calc-1"), 0)
    r = env.step("<view>tests/test_ops.py::test_add_zero</view>")
    first, second = r.observation.splitlines()[:2]
    assert "node id: showing tests/test_ops.py from the definition of test_add_zero" in first
    assert second.split(None, 1)[1].startswith("def test_add_zero")


CLASS_TESTS = """import pytest


def test_p():
    pass


class TestOther:
    def test_p(self):
        pass


class TestOps:
    @pytest.mark.parametrize("x", ["a-b", "c::d"])
    def test_p(self, x):
        assert x
"""


@pytest.mark.parametrize(
    "node", ["TestOps::test_p", "TestOps::test_p[a-b]", "TestOps::test_p[c::d]"]
)
def test_view_resolves_a_test_method_inside_its_class(env, node):
    """`file::Class::test[params]`: the method of that class (not a function of the same name
    elsewhere, not the class name, not the parameters)."""
    env.reset(Task("toy__calc-1"), 0)
    env.step(f"<bash>cat > tests/test_cls.py << 'EOF'\n{CLASS_TESTS}EOF</bash>")
    r = env.step(f"<view>tests/test_cls.py::{node}</view>")
    first, second = r.observation.splitlines()[:2]
    assert "from the definition of test_p" in first, r.observation
    line = CLASS_TESTS.splitlines().index("    def test_p(self, x):") + 1
    assert second.split(None, 1) == [str(line), "def test_p(self, x):"]


def test_view_resolves_a_unique_basename_with_a_note(env):
    env.reset(Task("toy__calc-1"), 0)
    r = env.step("<view>ops.py</view>")
    assert r.observation.startswith("(no ops.py at the top; showing calc/ops.py)")
    assert "def add(a, b):" in r.observation
    r = env.step("<view>test_ops.py::test_add</view>")  # both at once
    assert "showing tests/test_ops.py" in r.observation and "def test_add" in r.observation
    r = env.step("<view>nothing_here.py</view>")
    assert "cannot open nothing_here.py" in r.observation
    env.step("<bash>mkdir -p extra && cp calc/ops.py extra/ops.py</bash>")
    r = env.step("<view>ops.py</view>")
    assert r.observation == "ops.py is ambiguous: calc/ops.py, extra/ops.py"
