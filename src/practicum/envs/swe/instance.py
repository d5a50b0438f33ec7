"""A SWE task instance: SWE-bench's fields plus where the repository's source comes from.

Instances load from SWE-bench-format JSONL unchanged (FAIL_TO_PASS / PASS_TO_PASS as JSON
strings or lists). practicum adds a few optional fields:

    source      path of the repository at its *fixed* state: a .tar.gz / .zip archive or a
                folder, relative to the JSONL file's folder (or absolute)
    bug_patch   diff applied to `source` to reach the task's base (buggy) state; the gold
                `patch` undoes it (synthesized tasks; empty for instances whose source is
                already at base state)
    test_files  repository paths restored from the base state before grading (the agent's
                edits to them are discarded); default: every file matching the test globs
    test_args   extra pytest arguments (e.g. ["-o", "addopts="])
    tier        difficulty tier of a synthesized task (1 = names the function)
    meta        anything else (mutation record); never shown to the agent

`origin` (not a JSONL field) is the folder of the file the instance was loaded from: sandboxes
hide it, with `source`, so code under test cannot read gold patches or mutation records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from practicum.errors import PracticumError


class InstanceError(PracticumError):
    """An instance file or record cannot be used; the message names the file, line and key."""


@dataclass(frozen=True)
class SweInstance:
    instance_id: str
    repo: str
    problem_statement: str
    patch: str
    """The gold patch (source files only)."""
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    source: Path
    bug_patch: str = ""
    test_patch: str = ""
    test_files: tuple[str, ...] = ()
    test_args: tuple[str, ...] = ()
    tier: int = 1
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    origin: Path | None = field(default=None, compare=False)
    """Folder of the JSONL file this instance came from (hidden from sandboxes)."""


_REQUIRED = (
    "instance_id",
    "repo",
    "problem_statement",
    "patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "source",
)


def _test_ids(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise InstanceError(f"{where}: not a JSON list of test ids ({err})") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InstanceError(f"{where}: expected a list of test ids, got {type(value).__name__}")
    return tuple(value)


def parse_instance(record: dict[str, Any], base_dir: Path, where: str = "instance") -> SweInstance:
    """One JSONL record as a `SweInstance`; relative `source` paths resolve against base_dir."""
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise InstanceError(f"{where}: missing {', '.join(missing)}")
    source = Path(record["source"])
    source = source if source.is_absolute() else base_dir / source
    if not source.exists():
        raise InstanceError(f"{where}.source: {source} does not exist")
    return SweInstance(
        instance_id=str(record["instance_id"]),
        repo=str(record["repo"]),
        problem_statement=str(record["problem_statement"]),
        patch=str(record["patch"]),
        FAIL_TO_PASS=_test_ids(record["FAIL_TO_PASS"], f"{where}.FAIL_TO_PASS"),
        PASS_TO_PASS=_test_ids(record["PASS_TO_PASS"], f"{where}.PASS_TO_PASS"),
        source=source,
        bug_patch=str(record.get("bug_patch", "")),
        test_patch=str(record.get("test_patch", "")),
        test_files=tuple(record.get("test_files", ())),
        test_args=tuple(record.get("test_args", ())),
        tier=int(record.get("tier", 1)),
        meta=dict(record.get("meta", {})),
        origin=base_dir,
    )


def load_instances(path: Path) -> list[SweInstance]:
    """Every instance of a SWE-bench-format JSONL file (errors name the file and line)."""
    path = Path(path)
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InstanceError(f"{path}:{n}: not JSON ({err})") from None
        out.append(parse_instance(record, path.parent, f"{path}:{n}"))
    return out
