"""Unified diffs as per-file blocks: split, keep the source-file ones, write new ones.

`source_only` implements the first half of SWE-bench's grading rule: the agent's edits to test
files, conftest.py and pytest configuration are dropped, so the tests that decide the verdict
are always the task's own. It also drops files that would change how Python or pytest start
(sitecustomize.py, .pth files, top-level modules shadowing the standard library or pytest) and
compiled files (__pycache__, .pyc, .so) that would run instead of the visible source.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

TEST_DIRS = frozenset({"tests", "test", "testing"})
TEST_GLOBS = ("test_*.py", "*_test.py", "conftest.py", "tests.py")
CONFIG_FILES = frozenset(
    {
        "pytest.ini",
        ".pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
        ".coveragerc",
        "noxfile.py",
    }
)
SHADOWED = frozenset(sys.stdlib_module_names) | {
    "pytest",
    "_pytest",
    "pluggy",
    "py",
    "iniconfig",
    "packaging",
    "conftest",
}
"""Top-level module names a repository may not add (they would replace what pytest imports)."""

_HEADER = re.compile(r"^diff --git (?:\"?a/)(.+?)\"? (?:\"?b/)(.+?)\"?$")


@dataclass(frozen=True)
class FileDiff:
    """One file's block of a unified diff."""

    old_path: str | None
    """Path before (None for a new file)."""
    new_path: str | None
    """Path after (None for a deleted file)."""
    text: str

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys((self.old_path, self.new_path)) if p]


def _strip(path: str) -> str | None:
    path = path.strip().split("\t")[0].strip('"')
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def split_diff(diff: str) -> list[FileDiff]:
    """The per-file blocks of a git-style (or plain ---/+++) unified diff."""
    lines = diff.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    if not starts:  # plain unified diff: a block starts at each "--- " followed by "+++ "
        starts = [
            i
            for i in range(len(lines) - 1)
            if lines[i].startswith("--- ") and lines[i + 1].startswith("+++ ")
        ]
    blocks = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        body = lines[start:end]
        old = new = None
        for line in body:
            if line.startswith("--- "):
                old = _strip(line[4:])
            elif line.startswith("+++ "):
                new = _strip(line[4:])
                break
            elif line.startswith("rename from "):
                old = line[len("rename from ") :].strip()
            elif line.startswith("rename to "):
                new = line[len("rename to ") :].strip()
        if old is None and new is None:
            m = _HEADER.match(body[0].rstrip("\n"))
            if m:  # mode-only change or binary patch
                old, new = m.group(1), m.group(2)
            if any(x.startswith("new file mode") for x in body):
                old = None
            if any(x.startswith("deleted file mode") for x in body):
                new = None
        blocks.append(FileDiff(old, new, "".join(body)))
    return blocks


def is_protected(path: str, test_files: Iterable[str] = (), *, new_file: bool = False) -> bool:
    """True for a path whose edits grading discards: tests, conftest, pytest config, files that
    change interpreter start-up, git internals, and (for new files) top-level shadowing modules."""
    p = PurePosixPath(path)
    parts = p.parts
    name = p.name
    if path in set(test_files) or ".git" in parts or ".." in parts or p.is_absolute():
        return True
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo", ".so", ".pyd")):
        return True  # compiled code would run instead of (or besides) the visible source
    if any(part in TEST_DIRS for part in parts[:-1]):
        return True
    if name in CONFIG_FILES or name.endswith(".pth"):
        return True
    if any(fnmatch.fnmatch(name, g) for g in TEST_GLOBS):
        return True
    top = parts[0].removesuffix(".py") if parts else ""
    return new_file and top in SHADOWED


def source_only(diff: str, test_files: Iterable[str] = ()) -> tuple[str, list[str]]:
    """(the diff without protected files' blocks, the dropped paths)."""
    test_files = tuple(test_files)
    kept, dropped = [], []
    for block in split_diff(diff):
        new_file = block.old_path is None
        if any(is_protected(p, test_files, new_file=new_file) for p in block.paths):
            dropped.extend(block.paths)
        else:
            kept.append(block.text)
    text = "".join(kept)
    if text and not text.endswith("\n"):
        text += "\n"
    return text, dropped


def file_diff(path: str, old: str | None, new: str | None) -> str:
    """A git-apply-able diff turning `old` into `new` at repository path `path` (None = the
    file does not exist on that side)."""
    old_lines = (old or "").splitlines(keepends=True)
    new_lines = (new or "").splitlines(keepends=True)
    body = list(
        difflib.unified_diff(
            old_lines,
            new_lines,
            "/dev/null" if old is None else f"a/{path}",
            "/dev/null" if new is None else f"b/{path}",
            n=3,
        )
    )
    if not body:
        return ""
    out = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        out.append("new file mode 100644\n")
    elif new is None:
        out.append("deleted file mode 100644\n")
    for line in body:
        if line.endswith("\n"):
            out.append(line)
        else:  # last line of a file without a final newline
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)
