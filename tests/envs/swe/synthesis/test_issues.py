from practicum.envs.swe.synthesis.issues import (
    Facts,
    failure_block,
    model_issue,
    summary_messages,
    template_issue,
)

LOG = """\
=================================== FAILURES ===================================
______________________________ test_grades[95-A] _______________________________
tests/test_m.py:6: in test_grades
    assert grade_of(s) == g
E   AssertionError: assert 'B' == 'A'
______________________________ test_other ______________________________________
E   boom
=========================== short test summary info ============================
FAILED tests/test_m.py::test_grades[95-A] - AssertionError: assert 'B' == 'A'
"""
FACTS = Facts(
    "minipkg",
    "minipkg/__init__.py",
    "grade_of",
    ("tests/test_m.py::test_grades[95-A]",),
    {"tests/test_m.py::test_grades[95-A]": "AssertionError: assert 'B' == 'A'"},
    "E   AssertionError: assert 'B' == 'A'",
)


def test_failure_block_and_messages():
    assert (
        failure_block(LOG, "tests/test_m.py::test_grades[95-A]")
        == "E   AssertionError: assert 'B' == 'A'"
    )
    assert failure_block(LOG, "tests/test_m.py::test_missing") == ""
    assert summary_messages(LOG, FACTS.failing) == FACTS.messages


def test_tiers_reveal_less_and_less():
    t1, t2, t3 = (template_issue(FACTS, t) for t in (1, 2, 3))
    assert "grade_of" in t1 and "minipkg/__init__.py" in t1 and "assert 'B' == 'A'" in t1
    assert "grade_of" not in t2 and "assert 'B' == 'A'" in t2
    assert "grade_of" not in t3 and "assert" not in t3 and FACTS.failing[0] in t3


def test_model_issue_and_fallback():
    text = model_issue(FACTS, 3, lambda msgs: "Grades are off: a score of 95 gives B, not A.")
    assert text.startswith("Grades are off") and FACTS.failing[0] in text
    assert model_issue(FACTS, 3, lambda msgs: "") == template_issue(FACTS, 3)

    def broken(msgs):
        raise RuntimeError("no model")

    assert model_issue(FACTS, 2, broken) == template_issue(FACTS, 2)
