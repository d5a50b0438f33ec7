"""A tiny hand-made repository task: a 2-file package with one bug and its pytest file.

For tests, examples and smoke runs of the `swe` environment without the bundled suite:

    instance = write_toy_instance(folder)       # folder/toy.jsonl + folder/src/
    instances = load_instances(folder / "toy.jsonl")

The source folder is at the *base* (buggy) state, so `bug_patch` is empty; `patch` is the
gold fix (the `-` flipped back to `+`).
"""

from __future__ import annotations

import json
from pathlib import Path

from practicum.envs.swe.instance import SweInstance, load_instances

FILES = {
    "calc/__init__.py": "from calc.ops import add, scale\n",
    "calc/ops.py": (
        "def add(a, b):\n"
        '    """Sum of a and b."""\n'
        "    return a - b\n"
        "\n"
        "\n"
        "def scale(xs, k):\n"
        "    return [x * k for x in xs]\n"
    ),
    "tests/test_ops.py": (
        "from calc import add, scale\n"
        "\n"
        "\n"
        "def test_add():\n"
        "    assert add(2, 3) == 5\n"
        "\n"
        "\n"
        "def test_add_zero():\n"
        "    assert add(4, 0) == 4\n"
        "\n"
        "\n"
        "def test_scale():\n"
        "    assert scale([1, 2], 3) == [3, 6]\n"
    ),
}

# \x20: a blank context line of a unified diff is one space (spelled out, so no editor trims it).
GOLD_PATCH = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,6 +1,6 @@
 def add(a, b):
     \"\"\"Sum of a and b.\"\"\"
-    return a - b
+    return a + b
\x20
\x20
 def scale(xs, k):
"""

ISSUE = (
    "add(2, 3) returns -1 instead of 5. The function `add` in calc/ops.py is wrong; "
    "tests/test_ops.py::test_add fails with: assert -1 == 5"
)


def toy_record(instance_id: str = "toy__calc-1", source: str = "src") -> dict:
    """The JSONL record (SWE-bench fields as JSON strings, like the upstream files)."""
    return {
        "instance_id": instance_id,
        "repo": "toy/calc",
        "problem_statement": ISSUE,
        "patch": GOLD_PATCH,
        "base_commit": "",
        "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]),
        "PASS_TO_PASS": json.dumps(
            ["tests/test_ops.py::test_add_zero", "tests/test_ops.py::test_scale"]
        ),
        "source": source,
        "test_files": ["tests/test_ops.py"],
        "tier": 1,
        "meta": {"mutation": "op_change", "function": "add", "secret": "GOLD-PATCH-MARKER"},
    }


def write_toy_instance(folder: Path, repos: dict[str, str] | None = None) -> SweInstance:
    """Write the toy source tree and a one-line JSONL into `folder`; returns the instance.
    `repos` maps more instance ids to repo names (extra copies, e.g. for a held-out split)."""
    folder = Path(folder)
    for rel, text in FILES.items():
        path = folder / "src" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    records = [toy_record()]
    for iid, repo in (repos or {}).items():
        records.append({**toy_record(iid), "repo": repo})
    (folder / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return load_instances(folder / "toy.jsonl")[0]
