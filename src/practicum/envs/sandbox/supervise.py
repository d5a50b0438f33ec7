"""Supervise one sandboxed process tree: start it in a new session, read its output into
bounded buffers as it comes, enforce the wall deadline, and kill the whole tree at the end."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from practicum.envs.sandbox.cgroups import RunCgroup
from practicum.envs.sandbox.limits import Limits
from practicum.envs.sandbox.output import BoundedOutput

EXIT_GRACE = 1.0
"""Seconds to wait for the output pipes to close once the sandbox's first process has exited."""
CANCEL_POLL = 0.1
"""Seconds between looks at the cancel event while the tree runs."""


@contextlib.contextmanager
def stdin_file(text: str | None) -> Iterator[int]:
    """Stdin as a temporary file: no writer thread and no pipe deadlock, however large."""
    if text is None:
        yield subprocess.DEVNULL
        return
    with tempfile.TemporaryFile() as f:
        f.write(text.encode())
        f.seek(0)
        yield f.fileno()


@dataclass
class Supervised:
    """What the supervisor saw of one run."""

    stdout: str
    stderr: str
    returncode: int
    """Of the backend's first process; the code's own exit status comes from the backend."""
    timed_out: bool
    duration: float
    cpu_seconds: float
    """User + system CPU of the whole tree (every process was waited for by its parent)."""
    cancelled: bool = False
    """The caller's cancel event stopped the run before the tree exited."""


def supervise(
    command: list[str],
    env: dict[str, str],
    stdin: int,
    status_w: int,
    limits: Limits,
    cgroup: RunCgroup,
    cancel: threading.Event | None = None,
) -> Supervised:
    """Run `command` in a new session until it exits, `limits.wall_seconds` pass or `cancel` is
    set, then kill whatever is left of the tree. `status_w` is handed to the command and closed
    here."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            pass_fds=(status_w,),
            start_new_session=True,
        )
    finally:
        os.close(status_w)  # only the sandbox writes it now
    out, err = BoundedOutput(limits.output_bytes), BoundedOutput(limits.output_bytes)
    outputs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    sel = selectors.DefaultSelector()
    for fd in outputs:
        sel.register(fd, selectors.EVENT_READ)
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None  # no pidfd (Linux < 5.3): poll for the exit below
    deadline = start + limits.wall_seconds
    exited_at: float | None = None
    timed_out = cancelled = False
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd is None and _has_exited(proc.pid):
                exited_at = now
            pipes_open = any(key.fd in outputs for key in sel.get_map().values())
            if exited_at is not None and (not pipes_open or now >= exited_at + EXIT_GRACE):
                break
            if exited_at is None and now >= deadline:
                timed_out = True
                break
            if exited_at is None and cancel is not None and cancel.is_set():
                cancelled = True
                break
            until = deadline if exited_at is None else exited_at + EXIT_GRACE
            wait = until - now if pidfd is not None else min(until - now, 0.02)
            if cancel is not None:
                wait = min(wait, CANCEL_POLL)
            for key, _ in sel.select(max(wait, 0)):
                if key.fd == pidfd:
                    exited_at = time.monotonic()
                    sel.unregister(pidfd)
                else:
                    _pump(key.fd, outputs[key.fd], sel)
        end = exited_at if exited_at is not None else time.monotonic()
        # Kill before reaping: while the leader is a zombie its group id cannot be reused.
        _kill_tree(proc.pid, cgroup)
        _drain(sel, outputs, time.monotonic() + EXIT_GRACE)
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        if proc.returncode is None:  # an exception above: never leave the tree running
            _kill_tree(proc.pid, cgroup)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime
    return Supervised(
        out.text(), err.text(), proc.returncode, timed_out, end - start, cpu, cancelled
    )


def _has_exited(pid: int) -> bool:
    """Without reaping (WNOWAIT), so the process group id stays reserved until the kill."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _pump(fd: int, output: BoundedOutput, sel: selectors.BaseSelector) -> None:
    data = os.read(fd, 1 << 16)
    if data:
        output.feed(data)
    else:
        sel.unregister(fd)


def _drain(sel: selectors.BaseSelector, outputs: dict[int, BoundedOutput], until: float) -> None:
    """Read what is left in the pipes after the kill, until EOF or `until`."""
    while any(key.fd in outputs for key in sel.get_map().values()):
        remaining = until - time.monotonic()
        if remaining <= 0:
            return
        for key, _ in sel.select(remaining):
            if key.fd in outputs:
                _pump(key.fd, outputs[key.fd], sel)


def _kill_tree(pgid: int, cgroup: RunCgroup) -> None:
    """SIGKILL the session's process group and the run's cgroups. Processes that left the
    group (setsid) die with the pid namespace when its pid 1 does."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    cgroup.kill()


def read_available(fd: int) -> str:
    """Everything written on the status pipe so far (never blocks)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")
