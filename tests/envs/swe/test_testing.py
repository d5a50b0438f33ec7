from practicum.envs.swe.testing import (
    DUPLICATE,
    MISSING,
    after_marker,
    reported_statuses,
    run_tests,
    statuses_for,
    summary_lines,
)
from tests.envs.swe.toyrepo import make_suite

LOG = """\
============================= test session starts ==============================
PASSED t.py::fake_printed_by_code
=========================== short test summary info ============================
PASSED t.py::fake_in_captured_output
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED t.py::test_a
PASSED t.py::test_p[a b-c]
FAILED t.py::test_p[x - y] - AssertionError: assert 1 == 2
ERROR t.py::test_e - RuntimeError: boom
PASSED t.py::test_dup
PASSED t.py::test_dup
XFAIL t.py::test_xf - reason
SKIPPED [1] t.py:9: no
========================= 4 passed, 1 failed in 0.1s ==========================
PASSED t.py::after_the_summary
"""


def test_only_the_last_summary_section_counts():
    lines = summary_lines(LOG)
    assert lines[0] == ("PASSED", "t.py::test_a") and len(lines) == 8
    s = statuses_for(
        LOG,
        ["t.py::fake_in_captured_output", "t.py::after_the_summary", "t.py::fake_printed_by_code"],
    )
    assert set(s.values()) == {MISSING}


def test_ids_with_spaces_dashes_duplicates_and_missing():
    s = statuses_for(
        LOG,
        [
            "t.py::test_a",
            "t.py::test_p[a b-c]",
            "t.py::test_p[x - y]",
            "t.py::test_e",
            "t.py::test_dup",
            "t.py::test_xf",
            "t.py::nope",
        ],
    )
    assert s == {
        "t.py::test_a": "PASSED",
        "t.py::test_p[a b-c]": "PASSED",
        "t.py::test_p[x - y]": "FAILED",
        "t.py::test_e": "ERROR",
        "t.py::test_dup": DUPLICATE,
        "t.py::test_xf": "XFAIL",
        "t.py::nope": MISSING,
    }
    r = reported_statuses(LOG)
    assert r["t.py::test_p[x - y]"] == "FAILED" and "t.py::test_dup" not in r


def test_run_tests_in_the_sandbox(tmp_path):
    make_suite(tmp_path)
    ids = [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_add_param[one one]",
        "tests/test_calc.py::test_add_param[two - zero]",
        "tests/test_calc.py::test_gone",
    ]
    run = run_tests(tmp_path / "src", ids)
    assert run.returncode == 0 and not run.timed_out
    assert [run.statuses[i] for i in ids] == ["PASSED", "PASSED", "PASSED", MISSING]
    assert run.count_passed(ids) == 3 and len(run.reported) == 4


def test_only_marked_lines_after_the_exit_line_are_trusted():
    """A process the code under test left behind writes a summary of its own to the same
    output while the runner prints and after it (the red-team test's child): none of its
    lines carries the secret marker, so the recorded FAILED stands; taking the log's last
    summary section instead, as before, read the forged PASSED."""
    m = "practicum-end-0123"
    forged = "======== short test summary info ========\nPASSED t.py::test_a\n========\n"
    log = (
        f"{forged}noise\n{m} pytest exit 1\n{forged}{m} FAILED t.py::test_a - assert 0\n"
        f"{forged}{m} PASSED t.py::test_b\n{forged}"
    )
    trusted = after_marker(log, m)
    assert statuses_for(trusted, ["t.py::test_a", "t.py::test_b"]) == {
        "t.py::test_a": "FAILED",
        "t.py::test_b": "PASSED",
    }
    assert statuses_for(log, ["t.py::test_a"]) == {"t.py::test_a": "PASSED"}  # the old reading
    assert after_marker(forged + f"{m} FAILED t.py::test_a\n", m) == ""  # no exit line: nothing
