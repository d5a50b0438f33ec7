"""The work folder: which user owns it, and how the trusted side touches it safely.

Everything inside a workdir may have been written by untrusted code, so the trusted side
(often root) never follows a symlink there: a planted `main.py -> /etc/passwd` must not turn
writing the next script into overwriting /etc/passwd, a chown must not hand /etc/shadow to the
sandbox user, and reading `submission.csv -> /private/answers.csv` must not leak the answers.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from practicum.envs.sandbox.limits import SandboxError

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
UID_BASE = 2_000_000
UID_SPAN = 1_000_000


def sandbox_uid(workdir: Path) -> int:
    """Unprivileged uid that code in `workdir` runs as when the caller is root.

    Stable per workdir, so files from earlier steps of an episode stay writable; distinct
    across workdirs with high probability, so RLIMIT_NPROC (counted by the kernel per uid)
    is a per-sandbox budget. No account has it, so it owns nothing outside workdirs.
    """
    return UID_BASE + zlib.crc32(os.fsencode(os.path.realpath(workdir))) % UID_SPAN


def prepare_workdir(workdir: Path, uid: int) -> None:
    """Give `uid` the workdir (mode 0700) and everything in it, never following symlinks."""
    st = os.lstat(workdir)
    if not stat.S_ISDIR(st.st_mode):
        raise SandboxError(f"workdir {workdir} is not a directory")
    # fwalk holds a directory fd per level and refuses to descend through symlinks, so a
    # concurrent swap of a folder for a link cannot redirect the chown.
    for _, dirnames, filenames, dirfd in os.fwalk(workdir, follow_symlinks=False):
        for name in dirnames + filenames:
            entry = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if entry.st_uid != uid or entry.st_gid != uid:
                os.chown(name, uid, uid, dir_fd=dirfd, follow_symlinks=False)
    if st.st_uid != uid or st.st_gid != uid:
        os.chown(workdir, uid, uid, follow_symlinks=False)
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(workdir, 0o700)


def write_script(workdir: Path, name: str, text: str) -> Path:
    """Write `text` to workdir/name as a fresh regular file (a planted symlink is replaced)."""
    if not name or "/" in name or name in (".", ".."):
        raise SandboxError(f"script name must be a plain file name, got {name!r}")
    dirfd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.unlink(name, dir_fd=dirfd)
        except FileNotFoundError:
            pass
        except IsADirectoryError as e:
            raise SandboxError(f"cannot write the script: {workdir / name} is a directory") from e
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o644, dir_fd=dirfd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    finally:
        os.close(dirfd)
    return workdir / name


def read_workdir_file(workdir: Path, relpath: str, max_bytes: int = 64 * 2**20) -> bytes:
    """Read a regular file the sandboxed code left in `workdir`, without following symlinks.

    Use this (not open()) for anything the code produced, e.g. a submission: raises
    OSError (ELOOP) for a symlink anywhere on the path, ValueError for a non-regular file
    or one larger than `max_bytes`.
    """
    parts = Path(relpath).parts
    if not parts or Path(relpath).is_absolute() or ".." in parts:
        raise ValueError(f"expected a relative path inside the workdir, got {relpath!r}")
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    st = os.fstat(leaf)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        os.close(leaf)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{relpath} in {workdir} is not a regular file")
        raise ValueError(f"{relpath} in {workdir} has {st.st_size} bytes, more than {max_bytes}")
    with os.fdopen(leaf, "rb") as f:
        return f.read(max_bytes + 1)[:max_bytes]
