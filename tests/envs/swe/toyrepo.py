"""A tiny repository at its fixed state and a synthesized-style instance on it (shared by the
swe tests): `calc.add` is right at `source`; the bug patch flips `+` to `-`."""

from __future__ import annotations

import json
from pathlib import Path

from practicum.envs.swe.diffs import file_diff
from practicum.envs.swe.instance import load_instances

CALC = """def add(a, b):
    return a + b


def label(x):
    if x < 0:
        return "neg"
    return "pos"
"""
TESTS = """import pytest
from calc import add, label


def test_add():
    assert add(2, 3) == 5


@pytest.mark.parametrize("a,b", [(1, 1), (2, 0)], ids=["one one", "two - zero"])
def test_add_param(a, b):
    assert add(a, b) == a + b


def test_label():
    assert label(-1) == "neg"
    assert label(1) == "pos"
"""
F2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_param[one one]"]
P2P = ["tests/test_calc.py::test_label", "tests/test_calc.py::test_add_param[two - zero]"]


def make_suite(root: Path) -> Path:
    """Write the fixed repo under root/src and root/instances.jsonl; return the JSONL path."""
    root.mkdir(parents=True, exist_ok=True)
    src = root / "src"
    (src / "calc").mkdir(parents=True)
    (src / "tests").mkdir()
    (src / "calc" / "__init__.py").write_text(CALC)
    (src / "tests" / "test_calc.py").write_text(TESTS)
    buggy = CALC.replace("a + b", "a - b")
    record = {
        "instance_id": "toy__calc-1",
        "repo": "toy/calc",
        "problem_statement": "add(2, 3) returns -1",
        "source": "src",
        "bug_patch": file_diff("calc/__init__.py", CALC, buggy),
        "patch": file_diff("calc/__init__.py", buggy, CALC),
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": P2P,
        "meta": {"mutation": "secret"},
    }
    path = root / "instances.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


def toy_instance(tmp: Path):
    """The toy instance, its suite written under tmp/suite (workdirs go elsewhere in tmp)."""
    return load_instances(make_suite(tmp / "suite"))[0]
