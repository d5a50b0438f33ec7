import json

from practicum.cli import main
from practicum.envs.swe.grading import grade
from practicum.envs.swe.instance import load_instances

CODE = """def grade_of(score):
    if score < 0 or score > 100:
        raise ValueError(score)
    if score >= 90:
        return "A"
    if score >= 75:
        return "B"
    return "C"
"""
TESTS = """import pytest
from minipkg import grade_of


@pytest.mark.parametrize("s,g", [(95, "A"), (90, "A"), (80, "B"), (75, "B"), (10, "C")])
def test_grades(s, g):
    assert grade_of(s) == g


def test_range():
    with pytest.raises(ValueError):
        grade_of(101)


def test_type():
    assert isinstance(grade_of(50), str)
"""


def test_synthesize_cli_makes_gradable_tasks(tmp_path, capsys):
    pkg = tmp_path / "minipkg-1.0"
    (pkg / "minipkg").mkdir(parents=True)
    (pkg / "minipkg" / "__init__.py").write_text(CODE)
    (pkg / "test_minipkg.py").write_text(TESTS)
    out = tmp_path / "out"
    code = main(
        ["swe", "synthesize", str(pkg), "--out", str(out), "--max-tried", "4", "--max-kept", "2"]
    )
    assert code == 0
    (y,) = json.loads((out / "yield.json").read_text())
    assert y["package"] == "minipkg" and y["baseline_passed"] == 7 and 1 <= y["kept"] <= 2
    assert y["tried"] <= 4
    instances = load_instances(out / "instances.jsonl")
    assert len(instances) == y["kept"]
    inst = instances[0]
    assert inst.source == out / "sources" / "minipkg-1.0.tar.gz" and inst.FAIL_TO_PASS
    assert set(inst.FAIL_TO_PASS).isdisjoint(inst.PASS_TO_PASS)
    assert len(inst.FAIL_TO_PASS) + len(inst.PASS_TO_PASS) == 7
    assert "grade_of" not in inst.problem_statement or inst.tier == 1
    assert grade(inst, inst.patch).resolved
    assert not grade(inst, "").resolved
