"""Launcher of the `namespaces` backend, run as root in a fresh interpreter:

    PRACTICUM_SANDBOX_SPEC=SPEC python -I -S _launcher.py STATUS_FD
                                                    (SPEC: hex of a marshal-ed dict)

Standalone, stdlib only, few imports (its start-up is part of every run's overhead); it must
not import the trainer's code. The tree it builds:

    launcher   host namespaces: joins the run's cgroups, unshares, waits for init
    └─ init    pid 1 of a new pid namespace, root: builds the mount tree, reaps orphans,
       │       reports on STATUS_FD; when it dies the kernel kills its whole namespace
       └─ code unprivileged uid, no capabilities, no_new_privs, rlimits, cwd = workdir

Mount tree (a private mount namespace): every host mount read-only and nosuid; a fresh tmpfs
over each folder of `covers` (private /tmp and /dev/shm, non-system top-level folders such as
/root, /home, /work); `exposures` (the workdir read-write, interpreter folders read-only)
cloned before covering and put back at their own paths; `hidden` paths covered by an empty
mode-0 tmpfs (folders) or /dev/null (files); a new /proc.
Network: a new namespace holding only the loopback interface.

STATUS_FD receives lines: "error MESSAGE" when set-up fails, "started", then
"wait_status N" (N as from waitpid) when the code exits.
"""

import _signal as signal  # the C module: `signal` would import enum
import _socket  # likewise: `socket` imports selectors and enum
import ctypes
import fcntl
import marshal
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
# New mount API (Linux >= 5.12). Syscalls from 424 up share one number on every architecture.
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH, AT_FDCWD = 1, 0x8000, 0x1000, -100
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long  # every variadic syscall argument passed as a full machine word


class MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def check(result, what):
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def enc(path):
    return None if path is None else os.fsencode(path)


def mount(source, target, fstype, flags, data=None):
    result = libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    check(result, f"mount {target}")


def clone_tree(path):
    flags = OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC
    fd = libc.syscall(L(SYS_OPEN_TREE), L(AT_FDCWD), enc(path), L(flags))
    return check(fd, f"open_tree {path}")


def set_mount_attrs(dirfd, path, flags, attrs):
    attr = MountAttr(attr_set=attrs)
    attr_args = (ctypes.byref(attr), L(ctypes.sizeof(attr)))
    result = libc.syscall(L(SYS_MOUNT_SETATTR), L(dirfd), enc(path), L(flags), *attr_args)
    check(result, f"mount_setattr {path or dirfd}")


def move_mount(fd, target):
    args = (L(SYS_MOVE_MOUNT), L(fd), b"", L(AT_FDCWD), enc(target), L(MOVE_MOUNT_F_EMPTY_PATH))
    check(libc.syscall(*args), f"move_mount {target}")


def report(fd, *words):
    os.write(fd, (" ".join(map(str, words)).replace("\n", " ") + "\n").encode())


def build_mounts(spec):
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    clones = [(clone_tree(path), path, writable) for path, writable in spec["exposures"]]
    set_mount_attrs(AT_FDCWD, "/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
    for path, mode, size in spec["covers"]:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o},size={size}")
    for fd, path, writable in clones:
        attrs = MOUNT_ATTR_NOSUID | (0 if writable else MOUNT_ATTR_RDONLY)
        set_mount_attrs(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, attrs)
        os.makedirs(path, exist_ok=True)  # inside a cover the path is new
        move_mount(fd, path)
        os.close(fd)
    for path in spec["hidden"]:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0,size=4k")
        elif os.path.lexists(path):
            mount("/dev/null", path, None, MS_BIND)
        # else: not visible in this tree anyway
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def loopback_up():
    """bwrap does the same: the code can still talk to itself over 127.0.0.1."""
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        ifreq = bytearray(b"lo".ljust(40, b"\0"))  # struct ifreq: name[16], short flags, ...
        fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifreq)
        flags = int.from_bytes(ifreq[16:18], sys.byteorder) | IFF_UP
        ifreq[16:18] = flags.to_bytes(2, sys.byteorder)
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, bytes(ifreq))
    finally:
        s.close()


def exec_code(spec):
    """In the code's process: drop every privilege, apply limits, run the command."""
    argv = spec["argv"]
    try:
        uid = spec["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)  # clears all capabilities
        check(libc.prctl(L(PR_SET_NO_NEW_PRIVS), L(1), L(0), L(0), L(0)), "prctl")
        for name, (soft, hard) in spec["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        os.chdir(spec["workdir"])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; exec would keep that
            signal.signal(sig, signal.SIG_DFL)
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, f"sandbox: cannot run {argv[0]!r}: {e}\n".encode())
    os._exit(127)


def run_init(spec, status):
    try:
        check(libc.prctl(L(PR_SET_PDEATHSIG), L(signal.SIGKILL), L(0), L(0), L(0)), "prctl")
        build_mounts(spec)
        loopback_up()
    except OSError as e:
        report(status, "error", f"namespace set-up failed: {e}")
        os._exit(125)
    report(status, "started")
    code = os.fork()
    if code == 0:
        os.close(status)
        exec_code(spec)
    while True:  # reap every orphan; stop when the code's own process ends
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        if pid == code:
            report(status, "wait_status", wait_status)
            break
    os._exit(0)


def main():
    spec = marshal.loads(bytes.fromhex(os.environ.pop("PRACTICUM_SANDBOX_SPEC")))
    status = int(sys.argv[1])
    os.umask(0o022)
    try:
        for path in spec["cgroup_procs"]:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
        check(libc.unshare(L(flags)), "unshare")
    except OSError as e:
        report(status, "error", f"cannot create namespaces: {e}")
        os._exit(125)
    init = os.fork()
    if init == 0:
        run_init(spec, status)
    os.close(status)
    os.waitpid(init, 0)
    os._exit(0)


if __name__ == "__main__":
    main()
