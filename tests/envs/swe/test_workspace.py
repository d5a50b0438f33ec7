"""The workspace: a one-commit copy of the base state, diffed inside the sandbox."""

from __future__ import annotations

import pytest

from practicum.envs.sandbox import Limits
from practicum.envs.swe.instance import load_instances
from practicum.envs.swe.toy_repo import write_toy_instance
from practicum.envs.swe.workspace import Workspace

L = Limits(wall_seconds=20)


@pytest.fixture
def ws(tmp_path):
    write_toy_instance(tmp_path)
    inst = load_instances(tmp_path / "toy.jsonl")[0]
    (inst.source / ".git").mkdir()  # history shipped with the source must not reach the agent
    (inst.source / ".git" / "secret").write_text("old history")
    ws = Workspace.create(inst)
    yield ws
    ws.close()


def sh(ws, cmd):
    res = ws.run(["bash", "-c", cmd], L)
    return res.stdout + res.stderr


def test_one_commit_of_the_base_state_and_a_clean_tree(ws):
    assert sh(ws, "git rev-list --all | wc -l").strip() == "1"
    assert (
        sh(ws, "git status --porcelain; cat .git/secret 2>&1 | grep -c 'old history'").strip()
        == "0"
    )
    assert "return a - b" in sh(ws, "cat calc/ops.py")
    assert ws.diff() == ("", "")


def test_diff_covers_edits_new_and_deleted_files_even_after_an_agent_commit(ws):
    sh(
        ws,
        "sed -i 's/a - b/a + b/' calc/ops.py && echo 'X = 1' > calc/new.py && "
        "rm calc/__init__.py && mkdir -p calc/__pycache__ && echo junk > calc/__pycache__/"
        "ops.cpython-311.pyc && git add -A && git commit -qm mine && git commit -q --amend "
        "-m again",
    )
    patch, note = ws.diff()
    assert note == ""
    assert "+    return a + b" in patch and "b/calc/new.py" in patch
    assert "deleted file mode" in patch and "__pycache__" not in patch


def test_the_source_is_hidden_from_the_workspace(ws):
    out = sh(ws, f"ls {ws.hidden[0]} 2>&1; cat {ws.hidden[0]}/calc/ops.py 2>&1; echo END")
    assert "return a - b" not in out and out.strip().endswith("END")


def test_close_removes_the_workspace(ws):
    root = ws.root
    ws.close()
    assert not root.exists()
