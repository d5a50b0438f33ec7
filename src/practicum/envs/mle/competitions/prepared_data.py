"""Where a competition's prepared data lives, reading its answers, and verifying it by MD5.

Prepared data lives in `<data root>/<id>/prepared/{public,private}` (MLE-bench's layout), the
data root being the `data_root` argument, else `$PRACTICUM_DATA/mle`, else
`~/.cache/practicum/mle`. Raw files, for competitions that need them, are read from
`<data root>/<id>/raw` or the `raw` argument; bundled competitions build their data from
packages and ignore `raw`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from practicum.envs.mle.competitions.config import CompetitionError

MARKER = ".practicum-prepared.yaml"
"""Written into `prepared/` last: its presence means preparation finished."""


@dataclass
class PreparedPaths:
    """Where a prepared competition's files are."""

    public: Path
    """train.csv, test.csv, sample_submission.csv: everything the agent may read."""
    private: Path
    """The answers: never shown to the agent."""
    answers: Path | None = None
    """The answers file inside `private`."""
    sample_submission: Path | None = None
    """The sample submission inside `public`."""


def default_data_root() -> Path:
    """`$PRACTICUM_DATA/mle` if set, else `~/.cache/practicum/mle`."""
    base = os.environ.get("PRACTICUM_DATA")
    return Path(base) / "mle" if base else Path.home() / ".cache" / "practicum" / "mle"


def read_answers(path: Path) -> pd.DataFrame:
    """The private answers table (.csv, or .json/.jsonl as some MLE-bench competitions use)."""
    if not path.is_file():
        raise CompetitionError(f"answers file {path} does not exist: prepare the competition first")
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True)
    if path.suffix == ".json":
        return pd.read_json(path)
    return pd.read_csv(path)


def md5_file(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tree(folder: Path) -> dict:
    return {p.name: _tree(p) if p.is_dir() else md5_file(p) for p in sorted(folder.iterdir())}


def tree_checksums(public: Path, private: Path) -> dict:
    """{"public": {name: md5 or nested dict}, "private": {...}} (checksums.yaml's layout)."""
    return {"public": _tree(public), "private": _tree(private)}


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = str(value)
    return flat


def compare_checksums(expected: dict, actual: dict) -> list[str]:
    """Problems, one string per file: missing, or MD5 differs. Only public/private are checked
    (MLE-bench's checksums.yaml also has the raw zip's MD5, which we never see)."""
    want = _flatten({k: v for k, v in expected.items() if k in ("public", "private")})
    have = _flatten(actual)
    problems = []
    for name, md5 in sorted(want.items()):
        if name not in have:
            problems.append(f"{name} was not produced")
        elif have[name] != md5:
            problems.append(f"{name} has MD5 {have[name]}, expected {md5}")
    return problems


def move_into_place(staging: Path, prepared: Path) -> None:
    """Rename the finished staging folder to `prepared`, tolerating a concurrent winner."""
    try:
        os.rename(staging, prepared)
    except OSError:
        if (prepared / MARKER).is_file():
            return  # a concurrent prepare() finished first; its files are identical
        shutil.rmtree(prepared, ignore_errors=True)  # leftovers of an interrupted run
        os.rename(staging, prepared)
