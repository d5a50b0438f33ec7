"""What a sandboxed run may use (`Limits`) and what it did (`RunResult`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from practicum.errors import PracticumError

MIB = 2**20


class SandboxError(PracticumError):
    """The sandbox could not be set up (missing tool, kernel feature, bad path).

    Never raised for anything the sandboxed code itself does: crashes, timeouts and kills are
    reported in `RunResult`.
    """


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run. Every limit applies to the whole process tree."""

    wall_seconds: float = 30.0
    """Wall-clock budget; at the deadline the whole process tree is killed (timed_out=True)."""
    cpu_seconds: float | None = None
    """CPU-time budget per process (RLIMIT_CPU, SIGXCPU then SIGKILL one second later).
    None means wall_seconds + 5."""
    memory_mb: int = 2048
    """Address space per process (RLIMIT_AS) and, where cgroups are usable, resident memory of
    the whole tree. `import torch` needs more than 512; numpy/pandas/sklearn run in 1024."""
    file_size_mb: int = 256
    """Largest file a process may write (RLIMIT_FSIZE); also the size of the private /tmp."""
    max_processes: int = 64
    """Processes plus threads of the sandbox user (RLIMIT_NPROC, and the cgroup pids controller
    where usable). Keeps fork bombs contained."""
    output_bytes: int = 20_000
    """Bytes kept per stream (stdout, stderr): the head and tail halves around a
    '...[truncated N bytes]...' marker."""

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "memory_mb", "file_size_mb", "max_processes", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_seconds is not None and self.cpu_seconds <= 0:
            raise ValueError(f"Limits.cpu_seconds must be > 0 or None, got {self.cpu_seconds!r}")

    @property
    def cpu_limit(self) -> int:
        """RLIMIT_CPU soft limit in whole seconds (the kernel counts whole seconds)."""
        seconds = self.wall_seconds + 5 if self.cpu_seconds is None else self.cpu_seconds
        return max(1, math.ceil(seconds))

    def rlimits(self) -> dict[str, tuple[int, int]]:
        """(soft, hard) per resource name of the `resource` module, for the sandboxed process."""
        return {
            "RLIMIT_AS": (self.memory_mb * MIB, self.memory_mb * MIB),
            "RLIMIT_CPU": (self.cpu_limit, self.cpu_limit + 1),
            "RLIMIT_FSIZE": (self.file_size_mb * MIB, self.file_size_mb * MIB),
            "RLIMIT_NPROC": (self.max_processes, self.max_processes),
            "RLIMIT_CORE": (0, 0),
        }


@dataclass
class RunResult:
    """What happened to one sandboxed run."""

    returncode: int | None
    """Exit code; -N when killed by signal N; None when killed at the wall deadline."""
    stdout: str
    """Captured standard output, truncated to Limits.output_bytes (head and tail kept)."""
    stderr: str
    """Captured standard error, truncated like stdout."""
    duration: float
    """Wall-clock seconds from start to the end of the whole process tree."""
    timed_out: bool
    """The wall deadline passed and the tree was killed."""
    killed_reason: str | None
    """Why something was killed: 'timeout', 'memory' (cgroup OOM kill), 'cpu' (RLIMIT_CPU),
    'file_size' (SIGXFSZ), 'signal N' (any other signal), 'cancelled' (the caller's cancel
    event); None when nothing was killed."""
    backend: str
    """Sandbox that ran the code: 'bwrap' or 'namespaces'."""

    @property
    def ok(self) -> bool:
        """Exited with code 0 and nothing was killed."""
        return self.returncode == 0 and not self.timed_out and self.killed_reason is None
