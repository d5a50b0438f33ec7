"""What practicum leaves behind: its temp files and folders, and its child processes.

`TempWatch` records, through a Python audit hook (PEP 578: the `tempfile.mkdtemp` and
`tempfile.mkstemp` events), every practicum-named temp path this process creates, so a check
sees exactly this process's leftovers, never those of another run sharing the temp folder.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

PREFIX = "practicum"
"""Temp paths whose name starts with this are practicum's."""
PROCESS_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
"""Python's own per-process helpers: started on first use, they live as long as their parent."""


class TempWatch:
    """The practicum-named temp paths created by this process since the hook was installed."""

    _installed = False
    _paths: set[str] = set()
    _lock = threading.Lock()

    @classmethod
    def install(cls) -> None:
        """Start recording (once per process: audit hooks cannot be removed)."""
        if not cls._installed:
            cls._installed = True
            sys.addaudithook(cls._hook)

    @classmethod
    def _hook(cls, event: str, args: tuple) -> None:
        if event in ("tempfile.mkdtemp", "tempfile.mkstemp") and os.path.basename(
            str(args[0])
        ).startswith(PREFIX):
            with cls._lock:
                cls._paths.add(str(args[0]))

    @classmethod
    def remaining(cls) -> list[str]:
        """Recorded paths that still exist (sorted)."""
        with cls._lock:
            paths = list(cls._paths)
        gone = {p for p in paths if not os.path.lexists(p)}
        with cls._lock:
            cls._paths -= gone
        return sorted(set(paths) - gone)


def descendants(pid: int | None = None) -> list[tuple[int, str]]:
    """Live (not zombie) descendants of `pid` (default: this process) as (pid, command name)."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        state, ppid = rest.split()[:2]
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(entry))
            names[int(entry)] = name
    found, todo = [], list(children.get(root, []))
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        if not _is_helper(p):
            found.append((p, names[p]))
    return sorted(found)


def _is_helper(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return any(h in cmdline for h in PROCESS_HELPERS)


def lingering_children(grace: float = 5.0, ignore: set[int] = frozenset()) -> list[tuple[int, str]]:
    """Descendants still alive after waiting up to `grace` seconds for them to exit."""
    deadline = time.monotonic() + grace
    while True:
        alive = [c for c in descendants() if c[0] not in ignore]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)
