"""The agent's repository workspace: a fresh copy of the task's base state, in the sandbox.

    ws = Workspace.create(instance, hidden=[...])   # materialize, scrub history, one commit
    ws.run(["bash", "-lc", "pytest -q"])            # every command: sandboxed, cwd = the repo
    ws.diff()                                       # the agent's changes, computed inside
    ws.close()

Everything the agent can touch is written by untrusted code, so the trusted side never runs a
host tool on it: `git init` / commit and the final `git diff` run *inside* the sandbox (a
planted `.git/config` hook or fsmonitor then runs as the sandbox user, where it can do nothing
the agent could not do already), and the diff text comes back on stdout. The history the agent
sees is one commit of the base state; the source archive, the instance file (gold patch,
mutation record) and any `hidden` path are unreadable inside.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from practicum.envs.sandbox import Limits, RunResult, run_command
from practicum.envs.swe.instance import SweInstance

GIT_ENV = {
    "GIT_AUTHOR_NAME": "practicum",
    "GIT_AUTHOR_EMAIL": "swe@practicum.invalid",
    "GIT_COMMITTER_NAME": "practicum",
    "GIT_COMMITTER_EMAIL": "swe@practicum.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
"""Fixed identity and dates: the base commit's id depends on the tree alone."""

TOOL_ENV = {
    **GIT_ENV,
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "TERM": "dumb",
}
"""Environment of every command the agent runs (added to the sandbox's minimal one)."""

_INIT = (
    "rm -rf .git && git init -q -b main . && git add -A && "
    "git commit -q --no-verify -m 'base state' && git rev-parse HEAD"
)
# The diff ignores anything the agent's repo config could redirect: no external diff or
# textconv drivers, no hooks or fsmonitor; build and cache litter is left out.
_SAFE_GIT = (
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c diff.external= "
    "-c core.attributesFile=/dev/null"
)
_EXCLUDES = (
    "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.pyc' ':(exclude,glob).pytest_cache/**'"
)
DIFF_MAX_BYTES = 1_000_000
"""A larger diff is not graded (truncated output would not apply)."""


class WorkspaceError(RuntimeError):
    """The workspace could not be set up (a broken task, not the agent's doing)."""


@dataclass
class Workspace:
    root: Path
    """Private temp folder holding `repo` (removed by close)."""
    repo: Path
    """The agent's repository: cwd and only writable folder of every sandboxed command."""
    base_commit: str
    hidden: tuple[Path, ...] = ()
    backend: str = "auto"
    cancel: threading.Event = field(default_factory=threading.Event)
    _remove: weakref.finalize | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        instance: SweInstance,
        hidden: Sequence[Path] = (),
        backend: str = "auto",
        materialize=None,
        limits: Limits | None = None,
    ) -> "Workspace":
        """Materialize the base state into a fresh temp folder and make its one commit
        inside the sandbox. `materialize(instance, dest)` defaults to swe's repo module."""
        from practicum.envs.swe.repo import secret_paths

        if materialize is None:
            from practicum.envs.swe.repo import materialize
        root = Path(tempfile.mkdtemp(prefix="practicum-swe-"))
        repo = root / "repo"
        repo.mkdir()
        try:
            materialize(instance, repo)
            _remove_git_dirs(repo)  # trusted files: nothing the agent wrote yet
            # A folder holding the workspace itself cannot be hidden (it is outside the
            # sandbox's view anyway when it is a private-/tmp ancestor such as /tmp).
            hide = tuple(
                dict.fromkeys(
                    Path(h)
                    for h in (*hidden, *secret_paths(instance))
                    if not Path(os.path.realpath(root)).is_relative_to(os.path.realpath(h))
                )
            )
            ws = cls(root, repo, "", hide, backend)
            # Removed with the workspace object even if nobody calls close (a forgotten env).
            ws._remove = weakref.finalize(ws, _rmtree_nofollow, root)
            res = ws.run(["bash", "-c", _INIT], limits or Limits(wall_seconds=60))
            sha = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
            if not res.ok or len(sha) != 40:
                raise WorkspaceError(
                    f"{instance.instance_id}: git init in the sandbox failed "
                    f"({res.returncode}): {res.stderr.strip()[-300:]}"
                )
            ws.base_commit = sha
            return ws
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    def run(self, argv: Sequence[str], limits: Limits, stdin: str | None = None) -> RunResult:
        """Run argv sandboxed in the repository (no network, hidden paths unreadable)."""
        return run_command(
            argv,
            self.repo,
            limits,
            hidden_paths=self.hidden,
            env=TOOL_ENV,
            stdin=stdin,
            backend=self.backend,
            cancel=self.cancel,
        )

    def diff(self, limits: Limits | None = None) -> tuple[str | None, str]:
        """(patch, note): every change since the base commit as `git apply`-able text,
        computed inside the sandbox; (None, why) when it could not be (too large, timeout,
        the agent broke the repository)."""
        limits = limits or Limits(wall_seconds=30, output_bytes=DIFF_MAX_BYTES + 1)
        cmd = (
            f"{_SAFE_GIT} add -A -- . {_EXCLUDES} >/dev/null && "
            f"{_SAFE_GIT} diff --cached --no-ext-diff --no-textconv --no-color --binary "
            f"{self.base_commit} -- . {_EXCLUDES}"
        )
        res = self.run(["bash", "-c", cmd], limits)
        if not res.ok:
            why = res.killed_reason or f"exit {res.returncode}"
            return None, f"could not compute the diff ({why}): {res.stderr.strip()[-200:]}"
        if len(res.stdout.encode()) > DIFF_MAX_BYTES:
            return None, f"the diff is larger than {DIFF_MAX_BYTES} bytes"
        return res.stdout, ""

    def close(self) -> None:
        """Remove the workspace (never following the agent's symlinks)."""
        if self._remove is not None:
            self._remove()  # once: a finalizer runs at most once
        else:
            _rmtree_nofollow(self.root)


def _remove_git_dirs(repo: Path) -> None:
    """Drop any history the materialized copy came with (the agent sees one commit)."""
    for dirpath, dirnames, _ in os.walk(repo, followlinks=False):
        if ".git" in dirnames:
            shutil.rmtree(Path(dirpath) / ".git")
            dirnames.remove(".git")
    for leftover in repo.rglob(".git"):  # a .git *file* (worktree / submodule pointer)
        if leftover.is_file() or leftover.is_symlink():
            leftover.unlink()


def _rmtree_nofollow(path: Path) -> None:
    """shutil.rmtree uses fd-relative calls on Linux and unlinks symlinks without following
    them, so a planted link to a host folder removes only the link."""
    shutil.rmtree(path, ignore_errors=True)
