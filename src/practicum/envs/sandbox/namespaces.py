"""The `namespaces` backend: no extra tool, only Linux namespaces; needs root.

It shows the code about what bwrap shows: every top-level host folder except the system ones
(plan.SYSTEM_PATHS, /dev, /proc) is covered by an empty tmpfs, /tmp and /dev/shm by private
ones, top-level files by /dev/null; the interpreter folders and the workdir are then put back
at their own paths. Differences: /dev is the host's (read-only; devices keep their
permissions) and the system folders are shown whole, so a private file there must be named in
`hidden_paths`. The mount and process work happens in `_launcher.py`; this module decides what
to cover and what to put back.
"""

from __future__ import annotations

import marshal
import os
import shutil
import sys
from pathlib import Path

from practicum.envs.sandbox.backend import Status
from practicum.envs.sandbox.limits import MIB
from practicum.envs.sandbox.plan import SANDBOX_TMP, SYSTEM_PATHS, Plan, python_roots

NAME = "namespaces"
LAUNCHER = Path(__file__).with_name("_launcher.py")
PRIVATE_TMP = (SANDBOX_TMP, "/dev/shm")
"""Shared writable host folders replaced by private size-limited tmpfs."""
KEPT = (*SYSTEM_PATHS, "/dev", "/proc")
"""Host folders left visible (read-only)."""
SPEC_ENV = "PRACTICUM_SANDBOX_SPEC"
"""Environment variable carrying the launcher's spec (removed before the code runs)."""


def problem() -> str | None:
    """Why this backend cannot work here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (it creates namespaces and switches to an unprivileged uid)"
    return None


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def blocked_ancestor(path: Path, uid: int) -> Path | None:
    """Outermost folder above `path` that `uid` (no groups) may not traverse, e.g. /root 0700."""
    for folder in reversed(path.parents):
        if folder == Path("/"):
            continue
        st = os.stat(folder)
        if st.st_uid != uid and not st.st_mode & 0o001:
            return folder
    return None


def spec(plan: Plan) -> dict:
    """The launcher's instructions for this plan."""
    tmp_size = plan.limits.file_size_mb * MIB
    tmp_dirs = [d for d in PRIVATE_TMP if os.path.isdir(d) and not os.path.islink(d)]
    covers = [(Path(d), 0o1777, tmp_size) for d in tmp_dirs]
    blanks = []  # top-level files, e.g. a container's description
    for entry in sorted(os.listdir("/")):
        path = Path("/", entry)
        if str(path) in KEPT or str(path) in PRIVATE_TMP or path.is_symlink():
            continue
        if path.is_dir():
            covers.append((path, 0o755, MIB))
        elif path.is_file():
            blanks.append(path)
    wanted = [(plan.workdir, True)] + [(root, False) for root in python_roots()]
    # the launcher mounts folders: a file (a script, a socket) is shown with its folder
    wanted += [(path if path.is_dir() else path.parent, False) for path in plan.read_only]
    if plan.uid is not None:
        for path, _ in wanted:
            folder = blocked_ancestor(path, plan.uid)
            if folder is not None and not any(_within(folder, c) for c, _, _ in covers):
                covers.append((folder, 0o755, MIB))
    # The workdir always comes back (to be writable); interpreter folders only if covered.
    exposures = [
        (str(p), writable)
        for p, writable in wanted
        if writable or any(_within(p, c) for c, _, _ in covers)
    ]
    return {
        "argv": plan.argv,
        "workdir": str(plan.workdir),
        "uid": plan.uid,
        "rlimits": plan.limits.rlimits(),
        "cgroup_procs": list(plan.cgroup_procs),
        "covers": [(str(c), mode, size) for c, mode, size in covers],
        "exposures": exposures,
        "hidden": [str(h) for h in (*blanks, *plan.hidden)],
    }


def command(plan: Plan) -> list[str]:
    # The spec travels in the environment, not argv: the sandbox's pid 1 (the launcher) has a
    # world-readable /proc/1/cmdline, while its environ is closed to the code's other uid.
    encoded = marshal.dumps(spec(plan)).hex()
    return [
        shutil.which("env") or "/usr/bin/env",
        f"{SPEC_ENV}={encoded}",
        sys.executable,
        "-I",
        "-S",
        str(LAUNCHER),
        str(plan.status_fd),
    ]


def discard(command: list[str]) -> None:
    """Nothing to remove: the spec travels in the command's environment."""


def read_status(text: str) -> Status:
    """Lines written by the launcher: 'error MESSAGE', 'started', 'wait_status N'."""
    status = Status()
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "error":
            status.error = value
        elif key == "wait_status":
            status.finished = True
            status.returncode = os.waitstatus_to_exitcode(int(value))
    return status
