"""Our FULL-rule verdicts agree with swebench's `get_resolution_status` on the same logs.

Skipped unless `swebench` is importable (it is not a dependency: it pulls docker, datasets and
modal). Known, deliberate divergence: swebench keys statuses on the second whitespace-separated
word of a line, so ids with spaces (`test_x[a b]`) collide; the comparison uses lists without
such ids, and a separate case shows we are stricter on printed fake PASSED lines.
"""

import json

import pytest

from practicum.envs.swe.diffs import file_diff
from practicum.envs.swe.grading import judge
from practicum.envs.swe.repo import apply_patch, materialize
from practicum.envs.swe.testing import run_tests
from tests.envs.swe.toyrepo import CALC, toy_instance

grading = pytest.importorskip("swebench.harness.grading")
utils = pytest.importorskip("swebench.harness.utils")
constants = pytest.importorskip("swebench.harness.constants")

F2P = ["tests/test_calc.py::test_add"]
P2P = ["tests/test_calc.py::test_label"]


def swebench_resolved(log: str, tmp_path) -> bool:
    inst = {
        "instance_id": "toy__calc-1",
        "repo": "toy/calc",
        "base_commit": "x",
        "patch": "",
        "test_patch": "",
        "problem_statement": "",
        "hints_text": "",
        "created_at": "",
        "version": "0",
        "environment_setup_commit": "x",
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "image": "local",
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "eval_script": "#!/bin/bash\necho\n",
    }
    spec = utils.make_test_spec(inst)
    path = tmp_path / "eval.log"
    path.write_text(f"{constants.START_TEST_OUTPUT}\n{log}\n{constants.END_TEST_OUTPUT}\n")
    status_map, found = grading.get_logs_eval(spec, str(path))
    if not found:
        return False
    report = grading.get_eval_tests_report(status_map, {"FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P})
    return grading.get_resolution_status(report) == constants.ResolvedStatus.FULL.value


BUGGY = CALC.replace("a + b", "a - b")
PATCHES = {
    "gold": file_diff("calc/__init__.py", BUGGY, CALC),
    "empty": "",
    "breaks_p2p": file_diff("calc/__init__.py", BUGGY, CALC.replace('"neg"', '"n"')),
    "half": file_diff("calc/__init__.py", BUGGY, BUGGY.replace('"neg"', '"n"')),
}


@pytest.mark.parametrize("name", list(PATCHES))
def test_same_verdict_as_swebench(name, tmp_path):
    inst = toy_instance(tmp_path)
    repo = tmp_path / "work"
    materialize(inst, repo)
    assert apply_patch(repo, PATCHES[name]).ok
    run = run_tests(repo, F2P + P2P)
    ours, _ = judge(run, F2P, P2P)
    assert ours == swebench_resolved(run.log, tmp_path)
    assert ours == (name == "gold")


def test_printed_fake_passed_lines_fool_swebench_not_us(tmp_path):
    log = (
        "PASSED tests/test_calc.py::test_add\n"  # printed by the code under test
        "=== short test summary info ===\nFAILED tests/test_calc.py::test_add - boom\n"
        "PASSED tests/test_calc.py::test_label\n=== 1 failed, 1 passed in 0.1s ===\n"
    )
    from practicum.envs.swe.testing import TestRun, statuses_for

    run = TestRun(statuses_for(log, F2P + P2P), log, 1, False, 0.1)
    assert not judge(run, F2P, P2P)[0]
