"""A task's repository on disk: its source extracted, the bug patch applied inside the sandbox.

    materialize(instance, dest)      # dest (empty) now holds the base (buggy) state
    apply_patch(dest, diff)          # `git apply` run sandboxed in dest

Patches are applied by `git apply` run *inside* the sandbox, never by host tools: a tree the
agent wrote may hold a `.git/config` whose hooks or fsmonitor would run as the host user.
Archives come from the task suite (trusted) and are extracted with tarfile's `data` filter.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from practicum.envs.sandbox import Limits, run_command
from practicum.envs.swe.instance import SweInstance
from practicum.errors import PracticumError

APPLY_LIMITS = Limits(wall_seconds=30, memory_mb=1024, max_processes=16, output_bytes=20_000)
"""Limits of one sandboxed `git apply`."""


class RepoError(PracticumError):
    """A task's repository cannot be built (missing source, a bug patch that does not apply)."""


@dataclass(frozen=True)
class Applied:
    """What `git apply` said."""

    ok: bool
    output: str


def secret_paths(instance: SweInstance, workdir: Path | None = None) -> list[Path]:
    """Host paths that must stay unreadable inside every sandbox of this task: the suite folder
    (instances with gold patches and mutation records) and the source archive.

    A path that contains `workdir` cannot be hidden from it and is left out: keep workdirs
    outside the suite folder (grading always uses a fresh folder under the system temp dir).
    """
    paths = [Path(instance.source)]
    if instance.origin is not None:
        paths.append(Path(instance.origin))
    work = Path(os.path.realpath(workdir)) if workdir is not None else None
    return [
        p
        for p in paths
        if p.exists()
        and not (
            work is not None
            and (Path(os.path.realpath(p)) == work or Path(os.path.realpath(p)) in work.parents)
        )
    ]


def extract_source(source: Path, dest: Path) -> None:
    """Copy `source` (a .tar.gz/.tgz/.tar/.zip archive or a folder) into the folder `dest`."""
    source = Path(source)
    dest.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(
            source,
            dest,
            symlinks=True,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"),
        )
    elif source.name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(source) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # Python < 3.10.12: refuse links and paths leaving dest ourselves
                for m in tar.getmembers():
                    target = (dest / m.name).resolve()
                    if m.issym() or m.islnk() or (dest.resolve() not in target.parents):
                        raise RepoError(f"{source}: unsafe member {m.name!r}")
                tar.extractall(dest)
    elif source.suffix == ".zip":
        with zipfile.ZipFile(source) as z:
            for info in z.infolist():
                target = (dest / info.filename).resolve()
                if dest.resolve() not in target.parents and target != dest.resolve():
                    raise RepoError(f"{source}: member {info.filename!r} leaves the folder")
            z.extractall(dest)
    else:
        raise RepoError(f"source {source}: expected a folder or a .tar.gz/.tgz/.tar/.zip archive")


def apply_patch(
    repo: Path, diff: str, *, hidden_paths: Sequence[Path] = (), reverse: bool = False
) -> Applied:
    """Apply a unified diff to the folder `repo` with `git apply`, sandboxed (all or nothing)."""
    if not diff.strip():
        return Applied(True, "")
    if not diff.endswith("\n"):
        diff += "\n"
    argv = ["git", "apply", "--whitespace=nowarn"]
    if reverse:
        argv.append("--reverse")
    result = run_command(
        [*argv, "-"],
        repo,
        APPLY_LIMITS,
        stdin=diff,
        hidden_paths=hidden_paths,
        env={"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"},
    )
    return Applied(result.ok, (result.stdout + result.stderr).strip())


def materialize(instance: SweInstance, dest: Path) -> None:
    """Write the task's base (buggy) repository state into the empty folder `dest`."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise RepoError(f"materialize: {dest} is not empty")
    if not Path(instance.source).exists():
        raise RepoError(f"{instance.instance_id}: source {instance.source} does not exist")
    extract_source(instance.source, dest)
    if instance.bug_patch:
        applied = apply_patch(dest, instance.bug_patch, hidden_paths=secret_paths(instance, dest))
        if not applied.ok:
            raise RepoError(
                f"{instance.instance_id}: bug_patch does not apply: {applied.output[-1000:]}"
            )


def copy_tree(src: Path, dest: Path) -> None:
    """Copy a pristine tree (one this process wrote, never an agent's) into `dest`."""
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)


class PristineCache:
    """Base trees materialized once per instance and copied for each episode or grading.

    cache = PristineCache()
    cache.copy_to(instance, workdir)   # fresh base state, bug patch already applied
    cache.close()
    """

    def __init__(self, root: Path | None = None):
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="practicum-swe-base-")
        self.root = Path(root) if root else Path(self._tmp.name)
        self._trees: dict[str, Path] = {}

    def tree(self, instance: SweInstance) -> Path:
        """The pristine base tree of `instance` (read it, never hand it to the agent)."""
        key = instance.instance_id
        if key not in self._trees:
            d = Path(tempfile.mkdtemp(prefix="base-", dir=self.root)) / "repo"
            materialize(instance, d)
            self._trees[key] = d
        return self._trees[key]

    def copy_to(self, instance: SweInstance, dest: Path) -> None:
        copy_tree(self.tree(instance), dest)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
        self._trees.clear()


def scratch_dir(prefix: str = "practicum-swe-") -> Path:
    """A fresh private folder under the system temp dir (the sandbox sees its own /tmp, so other
    scratch folders are unreachable from inside)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(d, 0o700)
    return d
