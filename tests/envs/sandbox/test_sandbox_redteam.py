"""Red-team runs: code that tries to escape, starve or kill must be contained, and this test
process (the trainer's stand-in) must survive every one of them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from practicum.envs.sandbox import Limits, cgroups, run_python
from practicum.envs.sandbox.workdir import sandbox_uid

SHORT = Limits(wall_seconds=2, cpu_seconds=10, output_bytes=4000)
ROOT = os.geteuid() == 0


def host_processes(match) -> list[int]:
    """Pids of host processes whose /proc/<pid>/status text and cmdline satisfy `match`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            cmdline = (
                Path(f"/proc/{entry}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        if match(status, cmdline):
            found.append(int(entry))
    return found


def processes_with(marker: str) -> list[int]:
    """Live host processes (zombies excluded) whose command line contains `marker`."""
    return host_processes(lambda status, cmd: marker in cmd and "\nState:\tZ" not in status)


def processes_of_uid(uid: int) -> list[int]:
    def match(status: str, cmd: str) -> bool:
        for line in status.splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1]) == uid
        return False

    return host_processes(match)


def _assert_no_leftovers(workdir: Path, grace_s: float = 5.0) -> None:
    """No process of the sandbox's uid outlives the run: SIGKILLed processes leave /proc a
    moment later (a loaded machine was seen taking longer than the run's own wait), so
    they get `grace_s` to finish exiting; one still there after it is a leftover."""
    if ROOT:
        deadline = time.monotonic() + grace_s
        while processes_of_uid(sandbox_uid(workdir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_of_uid(sandbox_uid(workdir)) == []


def test_hidden_private_files_are_unreadable(backend: str, tmp_path: Path, workdir: Path):
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "answers.csv").write_text("id,y\n1,SECRET-OUTSIDE\n")
    inside = workdir / "private"
    inside.mkdir()
    (inside / "answers.csv").write_text("id,y\n1,SECRET-INSIDE\n")
    (workdir / "answers_copy.csv").write_text("SECRET-FILE\n")
    paths = [
        str(outside / "answers.csv"),
        str(inside / "answers.csv"),
        str(workdir / "answers_copy.csv"),
    ]
    code = f"""
import os
for path in {paths!r}:
    try:
        print(path, 'READ', repr(open(path).read()))
    except OSError as e:
        print(path, 'DENIED', type(e).__name__)
for folder in {[str(outside), str(inside)]!r}:
    try:
        print(folder, 'LISTED', os.listdir(folder))
    except OSError as e:
        print(folder, 'DENIED', type(e).__name__)
"""
    hidden = [outside, inside, workdir / "answers_copy.csv"]
    r = run_python(code, workdir, SHORT, hidden_paths=hidden, backend=backend)
    assert r.ok, r.stderr
    assert "SECRET" not in r.stdout + r.stderr
    assert "LISTED" not in r.stdout
    assert (inside / "answers.csv").read_text().endswith("SECRET-INSIDE\n")  # untouched on the host


def test_no_network_to_host_loopback_or_outside(backend: str, workdir: Path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # positive control: the listener is reachable from the host
        listener.accept()[0].close()
        code = f"""
import socket, time
for addr in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
    t = time.monotonic()
    try:
        socket.create_connection(addr, timeout=1).close()
        print(addr, "CONNECTED")
    except OSError as e:
        print(addr, "FAILED", type(e).__name__, round(time.monotonic() - t, 2))
try:
    print("DNS", socket.getaddrinfo("pypi.org", 443))
except OSError as e:
    print("DNS FAILED", type(e).__name__)
"""
        r = run_python(code, workdir, Limits(wall_seconds=8), backend=backend)
        assert r.ok, r.stderr
        assert "CONNECTED" not in r.stdout
        assert r.stdout.count("FAILED") == 4, r.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing reached the host's listener
    finally:
        listener.close()


def test_fork_bomb_is_bounded_and_cleaned_up(backend: str, workdir: Path):
    code = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("forks", n, type(e).__name__)
"""
    r = run_python(code, workdir, Limits(wall_seconds=10, max_processes=20), backend=backend)
    assert r.ok, r.stderr
    forks = int(r.stdout.split()[1])
    assert 5 <= forks < 20
    _assert_no_leftovers(workdir)
    assert subprocess.run(["true"]).returncode == 0  # the machine can still fork


def test_runaway_fork_bomb_is_contained(backend: str, workdir: Path):
    code = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
    r = run_python(code, workdir, Limits(wall_seconds=1.5, max_processes=16), backend=backend)
    assert r.timed_out and r.killed_reason == "timeout" and r.returncode is None
    _assert_no_leftovers(workdir)
    assert subprocess.run(["true"]).returncode == 0


def test_huge_allocation_fails(backend: str, workdir: Path):
    r = run_python(
        "x = bytearray(20 * 2**30)",
        workdir,
        Limits(wall_seconds=5, memory_mb=1024),
        backend=backend,
    )
    assert not r.ok
    assert "MemoryError" in r.stderr or r.killed_reason == "memory"


@pytest.mark.skipif("memory" not in {c for h in cgroups.layout() for c in h.controllers},
                    reason="no usable memory cgroup on this machine")  # fmt: skip
def test_memory_of_the_whole_tree_is_limited(backend: str, workdir: Path):
    # Each process stays under RLIMIT_AS; together they pass the cgroup limit.
    code = """
import os
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (120 * 2**20)
        import time; time.sleep(1)
        os._exit(0)
    pids.append(pid)
print([os.waitpid(p, 0)[1] for p in pids])
"""
    r = run_python(code, workdir, Limits(wall_seconds=10, memory_mb=300), backend=backend)
    assert r.killed_reason == "memory", r
    assert not r.ok


def test_infinite_loop_is_killed_at_the_wall_limit(backend: str, workdir: Path):
    r = run_python(
        "print('start', flush=True)\nwhile True: pass",
        workdir,
        Limits(wall_seconds=1.5),
        backend=backend,
    )
    assert r.timed_out and r.killed_reason == "timeout" and r.returncode is None
    assert r.stdout == "start\n"  # output printed before the kill is kept
    assert 1.5 <= r.duration < 10


def test_cpu_limit_kills(backend: str, workdir: Path):
    r = run_python(
        "while True: pass", workdir, Limits(wall_seconds=20, cpu_seconds=1), backend=backend
    )
    assert not r.timed_out
    assert r.killed_reason == "cpu"


@pytest.mark.parametrize("main_exits", [True, False], ids=["main-exits", "main-times-out"])
def test_setsid_grandchildren_die_with_the_run(backend: str, workdir: Path, main_exits: bool):
    marker = f"sandbox-grandchild-{uuid.uuid4().hex}"
    code = f"""
import os, subprocess, sys, time
sleeper = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(120)"
subprocess.Popen([sys.executable, "-c", sleeper, "gc1", {marker!r}], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:  # classic double-fork daemon
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", sleeper, "gc2", {marker!r}])
    os._exit(0)
while not (os.path.exists("gc1") and os.path.exists("gc2")):
    time.sleep(0.02)
open("started", "w").write("yes")
while {not main_exits}:
    time.sleep(1)
"""
    r = run_python(code, workdir, Limits(wall_seconds=4), backend=backend)
    assert (workdir / "started").read_text() == "yes"  # both grandchildren were running
    assert r.timed_out is (not main_exits)
    assert processes_with(marker) == []
    _assert_no_leftovers(workdir)


def test_process_scan_finds_a_live_marker():
    """Positive control for the check above."""
    marker = f"sandbox-control-{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        deadline = time.monotonic() + 5
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(marker) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


def test_writes_outside_the_workdir_fail(backend: str, tmp_path: Path, workdir: Path):
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    site = next(p for p in sys.path if p.endswith("site-packages"))
    targets = [
        "/work",
        "/root",
        "/etc",
        "/usr",
        "/",
        site,
        str(tmp_path),
        str(Path(sys.executable).parent),
    ]
    code = f"""
import os
for folder in {targets!r}:
    try:
        open(os.path.join(folder, {name!r}), "w").write("x")
        print("WROTE", folder)
    except OSError as e:
        print("DENIED", folder, type(e).__name__)
open("/tmp/" + {name!r}, "w").write("private tmp")
print("TMP", open("/tmp/" + {name!r}).read())
"""
    try:
        r = run_python(code, workdir, SHORT, backend=backend)
        assert r.ok, r.stderr
        assert "WROTE" not in r.stdout
        assert r.stdout.count("DENIED") == len(targets)
        assert "TMP private tmp" in r.stdout
    finally:
        leaked = [t for t in [*targets, "/tmp"] if os.path.exists(os.path.join(t, name))]
        for t in leaked:
            os.remove(os.path.join(t, name))
    assert leaked == []  # the sandbox's /tmp was private too


@pytest.mark.parametrize(
    "attack",
    ["os.kill(os.getppid(), 9)", "os.killpg(os.getpgrp(), 9)", "os.killpg(0, 9)", "os.kill(-1, 9)"],
)
def test_killing_upwards_only_hurts_the_sandbox(backend: str, workdir: Path, attack: str):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        code = (
            f"import os, time\ntry:\n    {attack}\nexcept OSError as e:\n"
            "    print(type(e).__name__)\ntime.sleep(0.2)\nprint('alive')"
        )
        r = run_python(code, workdir, SHORT, backend=backend)
        assert not r.timed_out
        assert r.ok or r.returncode == -9, r
        assert bystander.poll() is None  # a host process outside the sandbox is untouched
        assert run_python("print('next')", workdir, SHORT, backend=backend).stdout == "next\n"
    finally:
        bystander.kill()
        bystander.wait()


def test_host_processes_are_invisible(backend: str, workdir: Path):
    code = (
        f"import os\nprint({os.getpid()} in [int(p) for p in os.listdir('/proc') if p.isdigit()])"
    )
    r = run_python(code, workdir, SHORT, backend=backend)
    assert r.stdout == "False\n"


def test_huge_output_is_bounded(backend: str, workdir: Path):
    code = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"
    r = run_python(code, workdir, Limits(wall_seconds=1.5, output_bytes=1000), backend=backend)
    assert r.timed_out
    head, marker, tail = r.stdout.partition("...[truncated ")
    assert marker and len(head) == 501 and tail.endswith("\n" + "x" * 500)
    dropped = int(tail.split(" ")[0])
    assert dropped > 2**20  # megabytes went through, 1000 bytes were kept


def test_file_size_limit(backend: str, workdir: Path):
    code = "open('big.bin', 'wb').write(b'x' * (3 * 2**20))"
    r = run_python(code, workdir, Limits(wall_seconds=5, file_size_mb=1), backend=backend)
    assert r.returncode == 1 and "File too large" in r.stderr
    assert (workdir / "big.bin").stat().st_size <= 2**20


def test_cannot_regain_root(backend: str, workdir: Path):
    if not ROOT:
        pytest.skip("the caller is not root")
    code = """
import os
try:
    os.setuid(0)
    print("ROOT")
except OSError as e:
    print("DENIED", type(e).__name__)
print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])
"""
    r = run_python(code, workdir, SHORT, backend=backend)
    assert r.stdout.split() == ["DENIED", "PermissionError", "0000000000000000"]


def test_no_descriptor_of_the_trainer_leaks_in(backend: str, workdir: Path):
    r = run_python(
        "import os; print(sorted(os.listdir('/proc/self/fd')))", workdir, SHORT, backend=backend
    )
    assert r.stdout == "['0', '1', '2', '3']\n"  # 3: the listing's own descriptor


def test_closing_the_output_does_not_end_supervision(backend: str, workdir: Path):
    code = "import os, time\nos.close(1)\nos.close(2)\nwhile True: time.sleep(0.1)"
    r = run_python(code, workdir, Limits(wall_seconds=1.5), backend=backend)
    assert r.timed_out and r.killed_reason == "timeout"
    _assert_no_leftovers(workdir)


def test_proc_shows_no_launcher_spec(backend: str, tmp_path: Path, workdir: Path):
    """/proc/*/cmdline inside (pid 1 is the launcher or bwrap) names neither the hidden paths
    nor the mounts; other processes' environ is unreadable or clean."""
    secret = Path(os.path.realpath(os.path.dirname(os.__file__))) / "pydoc_data"  # shown
    assert secret.is_dir()
    code = (
        "import os\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    for name in ('cmdline', 'environ'):\n"
        "        try:\n"
        "            print(pid, name, open(f'/proc/{pid}/{name}', 'rb').read())\n"
        "        except OSError as e:\n"
        "            print(pid, name, 'unreadable')\n"
    )
    result = run_python(
        code, workdir, Limits(wall_seconds=30), hidden_paths=[secret], backend=backend
    )
    assert result.ok, result.stderr
    assert " 1 cmdline " in f" {result.stdout}"  # pid 1 was looked at
    for text in ("pydoc_data", "tmpfs"):
        assert text not in result.stdout and text.encode().hex() not in result.stdout
    assert "--ro-bind" not in result.stdout
    assert "PRACTICUM_SANDBOX_SPEC" not in result.stdout
