"""The `bwrap` backend: bubblewrap builds a new root holding only what the code needs.

Inside: system folders and the interpreter read-only, the workdir read-write, a private
size-limited /tmp and /dev/shm, a new /proc and minimal /dev, no network (loopback only), a new
pid namespace whose pid 1 is bwrap (killed with its parent: --die-with-parent). Hidden paths
that fall inside a mounted folder are covered; anything else on the host is simply absent.

Run by root, bwrap keeps uid 0 inside, and uid 0 is exempt from RLIMIT_NPROC; so bwrap grants
the code CAP_SETUID/CAP_SETGID only for `setpriv` to switch to the unprivileged sandbox uid
(which clears every capability), then `prlimit` applies the rlimits and execs the command.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from practicum.envs.sandbox.backend import Status
from practicum.envs.sandbox.limits import MIB
from practicum.envs.sandbox.plan import SANDBOX_TMP, SYSTEM_PATHS, Plan, python_roots

NAME = "bwrap"
SPEC_PREFIX = "practicum-bwrap-"
"""Name of the temporary file holding bwrap's options (see `_hide_options`)."""
PRLIMIT_OPTIONS = {
    "RLIMIT_AS": "as",
    "RLIMIT_CPU": "cpu",
    "RLIMIT_FSIZE": "fsize",
    "RLIMIT_NPROC": "nproc",
    "RLIMIT_CORE": "core",
}
# Join the run's cgroups before bwrap forks anything: `sh -c JOIN sh FILE... -- COMMAND...`
JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


def problem() -> str | None:
    """Why this backend cannot work here, or None."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    for tool in ("setpriv", "prlimit") if os.geteuid() == 0 else ("prlimit",):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux)"
    return None


def _within(path: Path, folders: list[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def command(plan: Plan) -> list[str]:
    args = [shutil.which("bwrap") or "bwrap"]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    args += ["--json-status-fd", str(plan.status_fd)]
    host_views: list[Path] = []  # host folders visible inside
    for p in SYSTEM_PATHS:  # read-only, or the same symlink (/bin -> usr/bin)
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
            host_views.append(Path(p))
    tmp_size = str(plan.limits.file_size_mb * MIB)
    args += ["--dev", "/dev", "--perms", "1777", "--size", tmp_size, "--tmpfs", "/dev/shm"]
    args += ["--proc", "/proc", "--perms", "1777", "--size", tmp_size, "--tmpfs", SANDBOX_TMP]
    made = {Path("/"), Path("/dev"), Path("/proc"), Path(SANDBOX_TMP)}  # exist; contents do not

    def make_parents(path: Path) -> None:
        # bwrap would create missing parents with mode 0700, closed to the sandbox uid.
        for folder in reversed(path.parents):
            if folder not in made and not _within(folder, host_views):
                args.extend(["--perms", "0755", "--dir", str(folder)])
                made.add(folder)

    for root in python_roots():
        if not _within(root, host_views):
            make_parents(root)
            args += ["--ro-bind", str(root), str(root)]
            host_views.append(root)
    for path in plan.read_only:
        if not _within(path, host_views):
            make_parents(path)
            args += ["--ro-bind", str(path), str(path)]
            if path.is_dir():
                host_views.append(path)
    make_parents(plan.workdir)
    args += ["--bind", str(plan.workdir), str(plan.workdir), "--chdir", str(plan.workdir)]
    host_views.append(plan.workdir)
    for hidden in plan.hidden:
        if not _within(hidden, host_views):
            continue  # never mounted: absent inside
        if hidden.is_dir():
            args += ["--perms", "0000", "--size", "4096", "--tmpfs", str(hidden)]
            args += ["--remount-ro", str(hidden)]
        else:
            args += ["--ro-bind", "/dev/null", str(hidden)]

    inner: list[str] = []
    if plan.uid is not None:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        inner += [shutil.which("setpriv") or "setpriv", f"--reuid={plan.uid}"]
        inner += [f"--regid={plan.uid}", "--clear-groups", "--inh-caps=-all", "--"]
    inner += [shutil.which("prlimit") or "prlimit"]
    inner += [f"--{PRLIMIT_OPTIONS[k]}={s}:{h}" for k, (s, h) in plan.limits.rlimits().items()]
    inner += ["--", *plan.argv]
    command = _hide_options(args, plan.status_fd) + ["--", *inner]
    if plan.cgroup_procs:
        command = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *plan.cgroup_procs, "--", *command]
    return command


def _hide_options(args: list[str], status_fd: int) -> list[str]:
    """bwrap's options (mounts, hidden paths, the workdir) passed through `--args FD`, so
    that /proc/1/cmdline inside the sandbox (bwrap itself) shows none of them: a file unlinked
    once opened, read by bwrap from fd N. N must not be the status fd the child inherits (an
    `exec N<` over it makes bwrap's status writes fail) and sh redirects single digits only."""
    n = next(fd for fd in range(3, 10) if fd != status_fd)
    fd, path = tempfile.mkstemp(prefix=SPEC_PREFIX)
    with os.fdopen(fd, "wb") as handle:
        handle.write(b"".join(os.fsencode(a) + b"\0" for a in args[1:]))
    script = f'f=$1; shift; exec {n}<"$f" || exit 125; rm -f "$f"; exec "$0" --args {n} "$@"'
    return ["/bin/sh", "-c", script, args[0], path]


def discard(command: list[str]) -> None:
    """Remove the options file of `command` if the sandbox never got to remove it itself (killed
    or cancelled before its shell ran): bwrap read it through an fd, so this is safe once the
    run is over."""
    prefix = os.path.join(tempfile.gettempdir(), SPEC_PREFIX)
    for arg in command:
        if arg.startswith(prefix):
            Path(arg).unlink(missing_ok=True)


def read_status(text: str) -> Status:
    """bwrap writes {"child-pid": ...} at start and {"exit-code": N} when its pid 1 ends; like a
    shell it reports death by signal S as 128 + S, translated back to -S here."""
    status = Status()
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        fields, pos = decoder.raw_decode(text, pos)
        if "exit-code" in fields:
            code = int(fields["exit-code"])
            status.finished = True
            status.returncode = -(code - 128) if 128 < code <= 128 + 64 else code
    return status
