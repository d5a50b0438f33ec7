"""What every backend needs to build its command line: the `Plan` of one run, the sandbox's
environment variables, and the folders that hold the interpreter."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from practicum.envs.sandbox.limits import Limits

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Host folders visible (read-only) inside every sandbox, besides the interpreter and workdir."""

SANDBOX_TMP = "/tmp"
"""Private, size-limited tmpfs inside every sandbox; also HOME."""

HELPER_PROCESSES = 4
"""Backend processes (launcher, pid-1 reaper) the cgroup pids limit allows besides the code's."""


@dataclass(frozen=True)
class Plan:
    """One sandboxed run, resolved: absolute paths, the sandbox uid, where to report status."""

    argv: list[str]
    """Command run inside the sandbox; argv[0] is looked up on the sandbox PATH."""
    workdir: Path
    """Real path of the work folder: the command's cwd and its only writable host folder."""
    uid: int | None
    """Unprivileged uid (and gid) to run as; None when the caller is not root (keep its uid)."""
    limits: Limits
    hidden: tuple[Path, ...]
    """Existing host paths (real paths) that must be unreadable inside."""
    cgroup_procs: tuple[str, ...]
    """cgroup.procs files the sandbox's first process joins before anything else runs."""
    status_fd: int
    """Inherited pipe on which the backend reports set-up errors and the code's exit status."""
    read_only: tuple[Path, ...] = ()
    """More host paths (real paths: files, folders, sockets) visible read-only at their own
    paths, e.g. an outside agent's venv and its script (`practicum.agent`); the namespaces
    backend shows a file with its whole folder."""


def python_roots() -> list[Path]:
    """Folders the running interpreter needs, read-only: the venv, the base installation and
    every package folder on sys.path besides (a venv that reuses another's packages through a
    .pth file, as scripts/vllm_venv.sh makes). Never the project's source or PYTHONPATH: only
    folders named site-packages or dist-packages."""
    roots = {
        Path(os.path.realpath(p))
        for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    }
    roots.add(Path(os.path.realpath(sys.executable)).parent.parent)
    roots |= {
        Path(os.path.realpath(p))
        for p in sys.path
        if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)
    }
    # Drop folders nested in another root: one mount covers them.
    return sorted(r for r in roots if not any(o != r and o in r.parents for o in roots))


def sandbox_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of the sandboxed code: a clean minimal set (nothing inherited from the
    trainer, whose environment may hold tokens), updated with `extra`.

    Thread pools default to one thread: many sandboxes share few cores, and every thread
    counts against `Limits.max_processes`.
    """
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_TMP,
        "TMPDIR": SANDBOX_TMP,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",  # prints reach the parent even if the code is then killed
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.update(extra or {})
    return env
