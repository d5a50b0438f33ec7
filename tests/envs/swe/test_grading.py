from practicum.envs.swe.diffs import file_diff
from practicum.envs.swe.grading import grade
from tests.envs.swe.toyrepo import CALC, toy_instance


def test_gold_resolves_and_empty_does_not(tmp_path):
    inst = toy_instance(tmp_path)
    gold = grade(inst, inst.patch)
    assert gold.resolved and gold.patch_applied and gold.reason == "resolved"
    assert gold.fail_to_pass == (2, 2) and gold.pass_to_pass == (2, 2)
    empty = grade(inst, "")
    assert not empty.resolved and empty.patch_applied
    assert empty.fail_to_pass == (0, 2) and empty.pass_to_pass == (2, 2)
    assert "FAIL_TO_PASS 0/2" in empty.reason


def test_patch_that_does_not_apply_is_unresolved(tmp_path):
    inst = toy_instance(tmp_path)
    bad = inst.patch.replace("a - b", "a * b")
    v = grade(inst, bad)
    assert not v.resolved and not v.patch_applied and v.reason == "patch does not apply"


def test_partial_fix_breaking_pass_to_pass(tmp_path):
    inst = toy_instance(tmp_path)
    buggy = CALC.replace("a + b", "a - b")
    half = CALC.replace('"neg"', '"negative"')
    v = grade(inst, file_diff("calc/__init__.py", buggy, half))
    assert not v.resolved and v.fail_to_pass == (2, 2) and v.pass_to_pass == (1, 2)
