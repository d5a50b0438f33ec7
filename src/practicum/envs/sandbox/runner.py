"""Run a command or a Python script sandboxed: choose a backend, prepare the workdir and the
run's cgroups, let `supervise` run it, and say what happened."""

from __future__ import annotations

import functools
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

from practicum.envs.sandbox import bwrap, namespaces
from practicum.envs.sandbox.cgroups import RunCgroup
from practicum.envs.sandbox.limits import MIB, Limits, RunResult, SandboxError
from practicum.envs.sandbox.plan import HELPER_PROCESSES, Plan, python_roots, sandbox_env
from practicum.envs.sandbox.supervise import read_available, stdin_file, supervise
from practicum.envs.sandbox.workdir import prepare_workdir, sandbox_uid, write_script

BACKENDS: dict[str, ModuleType] = {"bwrap": bwrap, "namespaces": namespaces}
"""In order of preference for backend='auto' (bwrap shows the code less of the host)."""


def available_backends() -> list[str]:
    """Backends that work on this machine (each checked once per process with a real run)."""
    return [name for name in BACKENDS if _problem(name) is None]


@functools.cache
def _problem(name: str) -> str | None:
    """Why backend `name` does not work here, or None; runs `true` in it once."""
    problem = BACKENDS[name].problem()
    if problem is not None:
        return problem
    try:
        with tempfile.TemporaryDirectory(prefix="practicum-sandbox-probe-") as d:
            result = _run(name, ["true"], Path(d), Limits(wall_seconds=20), (), None, None)
    except (SandboxError, OSError) as e:
        return str(e)
    if not result.ok:
        return f"a test run of `true` failed ({result.returncode}): {result.stderr.strip()[-500:]}"
    return None


def _choose(backend: str) -> str:
    if backend == "auto":
        for name in BACKENDS:
            if _problem(name) is None:
                return name
        reasons = "; ".join(f"{name}: {_problem(name)}" for name in BACKENDS)
        raise SandboxError(f"no sandbox backend works on this machine ({reasons})")
    if backend not in BACKENDS:
        expected = ", ".join(["auto", *BACKENDS])
        raise SandboxError(f"unknown sandbox backend {backend!r}; expected one of {expected}")
    problem = _problem(backend)
    if problem is not None:
        raise SandboxError(f"sandbox backend {backend!r} does not work here: {problem}")
    return backend


def run_command(
    argv: Sequence[str],
    workdir: Path,
    limits: Limits = Limits(),
    *,
    hidden_paths: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    backend: str = "auto",
    cancel: threading.Event | None = None,
    read_only: Sequence[Path] = (),
) -> RunResult:
    """Run `argv` sandboxed with cwd = `workdir` (its only writable host folder).

    argv[0] is looked up on the sandbox PATH (the venv's bin first). `hidden_paths` (e.g. a
    competition's private answers) are unreadable inside. `env` adds to or overrides the
    minimal sandbox environment (see plan.sandbox_env); nothing is inherited from the caller.
    When the caller is root the code runs as an unprivileged uid that becomes the owner of the
    workdir and everything in it (mode 0700). Read what the code wrote with
    `read_workdir_file`, never by following paths it may have turned into symlinks. Setting
    `cancel` (from another thread) kills the tree early: killed_reason 'cancelled'.
    `read_only` host paths (files, folders, sockets) are visible read-only at their own paths.
    """
    return _run(
        _choose(backend),
        list(argv),
        Path(workdir),
        limits,
        hidden_paths,
        env,
        stdin,
        cancel,
        read_only,
    )


def run_python(
    code: str,
    workdir: Path,
    limits: Limits = Limits(),
    *,
    hidden_paths: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    backend: str = "auto",
    script_name: str = "main.py",
    cancel: threading.Event | None = None,
) -> RunResult:
    """Write `code` to workdir/script_name and run it with this venv's interpreter, sandboxed.

    The venv's site-packages are importable (read-only); sys.argv[0] is `script_name`.
    """
    name = _choose(backend)
    workdir, _ = _check_paths(Path(workdir), hidden_paths)
    write_script(workdir, script_name, code)
    return _run(
        name, [sys.executable, script_name], workdir, limits, hidden_paths, env, stdin, cancel
    )


def _check_paths(workdir: Path, hidden_paths: Sequence[Path]) -> tuple[Path, tuple[Path, ...]]:
    workdir = Path(os.path.realpath(workdir))
    if not workdir.is_dir():
        raise SandboxError(f"workdir {workdir} is not a directory")
    shared = [Path(p) for p in ("/", "/tmp", "/var/tmp", "/dev/shm")]
    if workdir in shared or any(workdir == r or workdir in r.parents for r in python_roots()):
        raise SandboxError(
            f"workdir {workdir} is shared or holds the interpreter; use a folder of its own"
        )
    hidden = []
    for p in hidden_paths:
        real = Path(os.path.realpath(p))
        if real == workdir or real in workdir.parents:
            raise SandboxError(f"hidden path {p} contains the workdir {workdir}")
        if os.path.lexists(real):
            hidden.append(real)
    return workdir, tuple(hidden)


def _run(
    name: str,
    argv: list[str],
    workdir: Path,
    limits: Limits,
    hidden_paths: Sequence[Path],
    env: Mapping[str, str] | None,
    stdin: str | None,
    cancel: threading.Event | None = None,
    read_only: Sequence[Path] = (),
) -> RunResult:
    if not argv:
        raise ValueError("argv is empty")
    backend = BACKENDS[name]
    workdir, hidden = _check_paths(workdir, hidden_paths)
    uid = sandbox_uid(workdir) if os.geteuid() == 0 else None
    if uid is not None:
        prepare_workdir(workdir, uid)
    cgroup = RunCgroup(limits.memory_mb * MIB, limits.max_processes + HELPER_PROCESSES)
    status_r, status_w = os.pipe()
    try:
        plan = Plan(
            argv,
            workdir,
            uid,
            limits,
            hidden,
            cgroup.procs_files,
            status_w,
            tuple(Path(os.path.realpath(p)) for p in read_only),
        )
        with stdin_file(stdin) as stdin_fd:
            command = backend.command(plan)
            try:
                run = supervise(
                    command, sandbox_env(env), stdin_fd, status_w, limits, cgroup, cancel
                )
            finally:
                backend.discard(command)
        status = backend.read_status(read_available(status_r))
        cgroup.kill()
        oom_kills = cgroup.oom_kills()
    finally:
        os.close(status_r)
        cgroup.remove()
    if status.error:
        raise SandboxError(f"{name} sandbox: {status.error}")
    if run.cancelled and not status.finished:
        return RunResult(
            returncode=None,
            stdout=run.stdout,
            stderr=run.stderr,
            duration=run.duration,
            timed_out=False,
            killed_reason="cancelled",
            backend=name,
        )
    if not status.finished and not run.timed_out and oom_kills == 0:
        why = run.stderr.strip()[-2000:]
        raise SandboxError(f"{name} sandbox ended without running the code: {why}")
    if status.finished:
        returncode = status.returncode
    else:  # killed from outside: at the deadline, or by the OOM killer
        returncode = None if run.timed_out else run.returncode
    return RunResult(
        returncode=returncode,
        stdout=run.stdout,
        stderr=run.stderr,
        duration=run.duration,
        timed_out=run.timed_out,
        killed_reason=killed_reason(
            returncode, run.timed_out, oom_kills, run.cpu_seconds, limits.cpu_limit
        ),
        backend=name,
    )


def killed_reason(
    returncode: int | None, timed_out: bool, oom_kills: int, cpu_seconds: float, cpu_limit: int
) -> str | None:
    """Name the kill: the deadline first, then a memory-cgroup kill anywhere in the tree, then
    the signal that ended the code (SIGKILL counts as 'cpu' once the CPU budget is spent:
    RLIMIT_CPU sends SIGXCPU at the soft limit and SIGKILL one second later)."""
    if timed_out:
        return "timeout"
    if oom_kills > 0:
        return "memory"
    if returncode is None or returncode >= 0:
        return None
    sig = -returncode
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_seconds >= cpu_limit):
        return "cpu"
    if sig == signal.SIGXFSZ:
        return "file_size"
    return f"signal {sig}"
