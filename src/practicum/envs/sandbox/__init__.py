"""Sandboxed execution of agent-written code: ML scripts, calculator snippets, repository tests.

    result = run_python("print(1)", workdir, Limits(wall_seconds=5))

Every run gets: a new session and pid namespace (the whole tree dies at the deadline, even
processes that setsid away), no network (loopback only), an unprivileged uid when the caller is
root, rlimits on CPU, address space, file size and processes, cgroup memory/pids limits where
the machine allows, the host read-only except the workdir, a private /tmp, `hidden_paths`
unreadable, and stdout/stderr captured with bounded memory. Two backends: `bwrap` (bubblewrap;
preferred) and `namespaces` (plain Linux namespaces, root only).
"""

from practicum.envs.sandbox.limits import Limits, RunResult, SandboxError
from practicum.envs.sandbox.runner import available_backends, run_command, run_python
from practicum.envs.sandbox.workdir import read_workdir_file

__all__ = [
    "Limits",
    "RunResult",
    "SandboxError",
    "available_backends",
    "read_workdir_file",
    "run_command",
    "run_python",
]
