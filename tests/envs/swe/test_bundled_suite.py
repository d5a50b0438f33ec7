"""The bundled suite: size and spread, and one gold patch per package resolves (the full gold
check over every task is `practicum swe check`, a command, not a unit test)."""

from collections import Counter

import pytest

from practicum.envs.swe.cli import package_of
from practicum.envs.swe.grading import grade
from practicum.envs.swe.instance import load_instances
from practicum.tasks.swe import HELD_OUT_PACKAGES, bundled_instances_path, bundled_packages

INSTANCES = load_instances(bundled_instances_path())
FIRST = {}
for _inst in INSTANCES:
    FIRST.setdefault(package_of(_inst), _inst)


def test_suite_size_packages_tiers_and_licences():
    per_pkg = Counter(package_of(i) for i in INSTANCES)
    assert len(INSTANCES) >= 60 and len(per_pkg) >= 5
    assert min(per_pkg.values()) >= 8, per_pkg
    assert {i.tier for i in INSTANCES} == {1, 2, 3}
    assert set(HELD_OUT_PACKAGES) <= set(per_pkg)
    assert len({i.instance_id for i in INSTANCES}) == len(INSTANCES)
    for name, rec in bundled_packages().items():
        assert rec["license"], name
    for inst in INSTANCES:
        assert inst.FAIL_TO_PASS and set(inst.FAIL_TO_PASS).isdisjoint(inst.PASS_TO_PASS)
        assert inst.meta["mutation"]["file"] not in inst.test_files


@pytest.mark.parametrize("package", sorted(FIRST))
def test_one_gold_patch_per_package_resolves(package):
    inst = FIRST[package]
    v = grade(inst, inst.patch)
    assert v.resolved, (v.reason, v.log_tail[-1500:])


def test_empty_patch_does_not_resolve():
    inst = FIRST["inflection"]
    v = grade(inst, "")
    assert not v.resolved and v.fail_to_pass[0] == 0
