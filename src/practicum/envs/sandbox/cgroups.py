"""Per-run cgroups: a memory limit and a process limit for the whole tree, an OOM-kill count,
and a way to kill every process of a run.

Machines differ: cgroup v1 (a hierarchy per controller), v2 (one unified hierarchy), or a mix
(one machine here has v1 memory/pids plus a v2 mount holding only hugetlb). The layout is read
at run time from /proc/self/mountinfo and /proc/self/cgroup, and run cgroups are created below
this process's own cgroup, so whatever limits the caller lives under still apply. Anything not
usable (controller not mounted, not writable, not delegated) is skipped, never an error:
rlimits and the pid namespace still bound the run.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = frozenset({"memory", "pids"})
PREFIX = "practicum-sandbox-"
_counter = itertools.count()


@dataclass(frozen=True)
class Hierarchy:
    """Where this process sits in one cgroup hierarchy; run cgroups are made inside."""

    parent: Path
    version: int
    """1 or 2."""
    controllers: frozenset[str]
    """Usable controllers among CONTROLLERS."""


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_layout(mountinfo: str, proc_cgroup: str) -> list[Hierarchy]:
    """Hierarchies holding memory/pids for a process with these /proc files (no access checks)."""
    paths: dict[str, str] = {}  # controller (or "" for v2) -> this process's cgroup path
    for line in proc_cgroup.splitlines():
        hid, ctrls, path = line.split(":", 2)
        if hid == "0" and ctrls == "":
            paths[""] = path
        for c in ctrls.split(","):
            paths[c] = path
    found = []
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields, post_fields = pre.split(), post.split()
        if len(fields) < 5 or len(post_fields) < 3:
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        fstype, options = post_fields[0], set(post_fields[2].split(","))
        if fstype == "cgroup":
            ctrls = frozenset(options & CONTROLLERS)
            path = paths.get(next(iter(ctrls)), None) if ctrls else None
            version = 1
        elif fstype == "cgroup2":
            ctrls, path, version = CONTROLLERS, paths.get(""), 2
        else:
            continue
        if path is None:
            continue
        if root != "/" and (path == root or path.startswith(root + "/")):
            path = path[len(root) :]
        found.append(Hierarchy(Path(mountpoint) / path.lstrip("/"), version, ctrls))
    return found


@functools.cache
def layout() -> tuple[Hierarchy, ...]:
    """Usable hierarchies of this machine for this process (detected once)."""
    try:
        with open("/proc/self/mountinfo") as f, open("/proc/self/cgroup") as g:
            candidates = parse_layout(f.read(), g.read())
    except OSError:
        return ()
    usable = []
    for h in candidates:
        ctrls = h.controllers
        if h.version == 2:
            try:
                ctrls = ctrls & set((h.parent / "cgroup.subtree_control").read_text().split())
            except OSError:
                continue
        if ctrls and os.access(h.parent, os.W_OK):
            usable.append(Hierarchy(h.parent, h.version, frozenset(ctrls)))
            _remove_stale(h.parent)
    return tuple(usable)


def _remove_stale(parent: Path) -> None:
    """Remove run cgroups left by dead processes (a crashed trainer)."""
    for d in parent.glob(PREFIX + "*"):
        pid = d.name[len(PREFIX) :].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                d.rmdir()
            except OSError:
                pass


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


class RunCgroup:
    """The cgroup directories of one run (one per usable hierarchy; possibly none)."""

    def __init__(self, memory_bytes: int, pids_max: int) -> None:
        self.dirs: list[tuple[Hierarchy, Path]] = []
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        for h in layout():
            d = h.parent / name
            try:
                d.mkdir()
            except OSError:
                continue
            ok = True
            if "memory" in h.controllers:
                limit = "memory.limit_in_bytes" if h.version == 1 else "memory.max"
                ok &= _write(d / limit, str(memory_bytes))
                # No swapping past the limit (files exist only with swap accounting).
                if h.version == 1 and (d / "memory.memsw.limit_in_bytes").exists():
                    _write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))
                if h.version == 2 and (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            if "pids" in h.controllers:
                ok &= _write(d / "pids.max", str(pids_max))
            if ok:
                self.dirs.append((h, d))
            else:
                _rmdir(d)

    @property
    def controllers(self) -> set[str]:
        return {c for h, _ in self.dirs for c in h.controllers}

    @property
    def procs_files(self) -> tuple[str, ...]:
        return tuple(str(d / "cgroup.procs") for _, d in self.dirs)

    def oom_kills(self) -> int:
        """Processes the kernel killed for exceeding the memory limit."""
        total = 0
        for h, d in self.dirs:
            if "memory" not in h.controllers:
                continue
            name = "memory.oom_control" if h.version == 1 else "memory.events"
            try:
                for line in (d / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        total += int(value)
            except OSError:
                pass
        return total

    def pids(self) -> set[int]:
        found: set[int] = set()
        for _, d in self.dirs:
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return found

    def kill(self, attempts: int = 200) -> None:
        """SIGKILL every process in the run's cgroups, repeating until none is left."""
        for _, d in self.dirs:
            _write(d / "cgroup.kill", "1")  # v2 >= 5.14: atomic
        for _ in range(attempts):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)

    def remove(self) -> None:
        for _, d in self.dirs:
            _rmdir(d)
        self.dirs = []


def _rmdir(d: Path, attempts: int = 50) -> None:
    """rmdir fails with EBUSY until the last exiting task has left; retry briefly."""
    for _ in range(attempts):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.002)
