"""Red team, agent side: the policy is an adversary with a shell in its workspace. Every
attack runs through the real environment (real sandbox, real FULL-rule grading) and must
leave the host untouched and earn no reward it did not earn by fixing the bug."""

from __future__ import annotations

import os
import shlex
import time

import pytest

from practicum.envs.base import Task
from practicum.envs.registry import SuiteContext, build_suite
from practicum.envs.sandbox.plan import python_roots
from practicum.envs.swe.toy_repo import write_toy_instance

FIX = "<edit>calc/ops.py\n<old>\n    return a - b\n</old>\n<new>\n    return a + b\n</new>\n</edit>"
MARKER = "GOLD-PATCH-MARKER"  # in the instance's meta (the mutation record)


@pytest.fixture
def suite_file(tmp_path):
    write_toy_instance(tmp_path / "suite", repos={"toy__other-1": "toy/other"})
    return tmp_path / "suite" / "toy.jsonl"


@pytest.fixture
def env(suite_file):
    suite = build_suite(
        "swe",
        {"instances": str(suite_file), "held_out_packages": ["other"], "command_seconds": 10},
        SuiteContext(max_turns=10),
    )
    env = suite.make_env(None)
    env.reset(Task("toy__calc-1"), 0)
    yield env
    env.close()


def bash(env, cmd):
    return env.step(f"<bash>{cmd}</bash>").observation


def test_cannot_read_the_gold_patch_or_mutation_record(env, suite_file):
    out = bash(
        env,
        f"cat {suite_file}; ls {suite_file.parent}; cat {suite_file.parent}/src/"
        f"calc/ops.py; ls /work 2>&1; grep -rl {MARKER} /root /home 2>/dev/null; "
        f"python -c 'import practicum' 2>&1 | tail -1",
    )
    assert MARKER not in out and "a + b" not in out and "GOLD" not in out.replace(MARKER, "")
    r = env.step("<submit></submit>")
    assert r.reward == 0.0 and not r.solved


def test_git_history_holds_only_the_base_state(env):
    out = bash(
        env,
        "git log --all --oneline | wc -l; git reflog | wc -l; "
        "git log -p --all | grep -c 'a + b'; git stash list | wc -l; "
        "ls .git/refs/tags | wc -l; git count-objects -v | grep '^count'",
    )
    lines = out.split("\n")
    assert lines[:5] == ["1", "1", "0", "0", "0"], out


def test_other_workspaces_are_invisible(env, suite_file):
    """Another episode's workspace is absent: neither its folder nor its files. The search
    skips the interpreter's read-only installation (a venv under /tmp is mounted at its own
    path there) and is bounded, so it does not depend on where the checkout or venv lives."""
    suite = build_suite(
        "swe",
        {"instances": str(suite_file), "held_out_packages": ["other"]},
        SuiteContext(max_turns=4),
    )
    other = suite.make_env(None)
    other.reset(Task("toy__calc-1"), 0)
    try:
        bash(other, "echo the-other-secret > calc/secret.txt")
        root = os.path.realpath(other._ws.root)
        skip = " -o ".join(f"-path {shlex.quote(str(r))}" for r in python_roots())
        out = bash(
            env,
            f"ls -a /tmp ..; test -e {shlex.quote(root)} && echo OTHER-VISIBLE; "
            f'timeout 20 find /tmp "$(cd .. && pwd)" \\( {skip} \\) -prune -o '
            f"-type f -size -1024k -print0 | head -z -n 5000 | "
            f"xargs -0r grep -l the-other-secret | sed 's/^/LEAK /'; echo END",
        )
        assert out.strip().endswith("END"), out
        assert "LEAK" not in out and "OTHER-VISIBLE" not in out
        assert os.path.basename(root) not in out
    finally:
        other.close()


def test_background_processes_die_with_the_turn(env, tmp_path):
    bash(
        env,
        "(sleep 2; echo late > calc/late.py) & disown; "
        "nohup sh -c 'sleep 2; echo late2 > calc/late2.py' >/dev/null 2>&1 & "
        "setsid sh -c 'sleep 2; echo late3 > calc/late3.py' & echo started",
    )
    time.sleep(3.5)
    out = bash(env, "ls calc; ps -e -o comm= | grep -c sleep")
    assert "late" not in out and "\n0\n" in out, out
    r = env.step("<submit/>")
    assert r.reward == 0.0 and "late" not in r.info["patch"]


def test_planted_git_config_never_runs_on_the_host(env, tmp_path):
    host_marker = tmp_path / "host-pwned"
    hook = f"#!/bin/sh\ntouch {host_marker}\n"
    bash(
        env,
        f"printf '{hook}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
        f"cp .git/hooks/pre-commit .git/hooks/post-checkout; "
        f"git config core.fsmonitor '.git/hooks/pre-commit'; "
        f"git config diff.external 'sh -c \"echo FAKE\"'; "
        f"git config core.hooksPath .git/hooks; echo '* diff=fake' > .gitattributes; "
        f"git config diff.fake.textconv 'echo FAKE'",
    )
    env.step(FIX)
    r = env.step("<submit></submit>")
    assert not host_marker.exists()
    # the fix is still graded on its merits: the planted drivers did not rewrite the diff
    assert r.solved and r.reward == 1.0 and "FAKE" not in r.info["patch"]
    assert "return a + b" in r.info["patch"]


def test_symlinks_out_of_the_workspace_are_contained(env, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host data")
    out = bash(
        env,
        f"ln -s {outside} calc/outlink; ln -s /etc/passwd calc/passwd.py; "
        f"echo overwrite > calc/outlink/keep.txt 2>&1; cat calc/outlink/keep.txt "
        f"2>&1; echo x >> calc/passwd.py 2>&1; echo END",
    )
    assert "host data" not in out
    r = env.step("<submit></submit>")
    assert r.reward == 0.0
    ws_root = env._ws.root
    env.close()
    assert not ws_root.exists()
    assert (outside / "keep.txt").read_text() == "host data"
    assert os.path.getsize("/etc/passwd") > 0 and "overwrite" not in open("/etc/passwd").read()


def test_editing_tests_or_a_passing_conftest_earns_nothing(env):
    bash(
        env,
        "printf 'def test_add():\\n    assert True\\n' > tests/test_ops.py; "
        "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\n"
        "def pytest_runtest_makereport(item, call):\\n    o = yield\\n"
        '    o.get_result().outcome = "passed"\\n\' > conftest.py; '
        "echo 'tests/test_ops.py::test_add PASSED' > PASSED.txt",
    )
    r = env.step("<submit></submit>")
    assert r.done and r.reward == 0.0 and not r.solved
