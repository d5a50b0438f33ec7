"""What a backend module provides, and what it reports back about a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from practicum.envs.sandbox.plan import Plan


@dataclass
class Status:
    """A backend's own account of a run, read from its status pipe after the run."""

    finished: bool = False
    """The backend saw the code's process exit (not when killed from outside or set-up failed)."""
    returncode: int | None = None
    """The code's exit code, -N for signal N; None when not finished."""
    error: str | None = None
    """Set-up failure reported by the backend itself."""


class Backend(Protocol):
    """A module: bwrap.py or namespaces.py."""

    NAME: str

    def problem(self) -> str | None:
        """Why the backend cannot work on this machine (missing tool, not root), or None."""
        ...

    def command(self, plan: Plan) -> list[str]:
        """Command line that runs `plan.argv` sandboxed; started in a new session."""
        ...

    def discard(self, command: list[str]) -> None:
        """Remove files `command` needed, once its run is over (even if it never started)."""
        ...

    def read_status(self, text: str) -> Status:
        """Parse what the backend wrote on `plan.status_fd`."""
        ...
