"""Pure pieces of the sandbox: output truncation, kill classification, limits, cgroup layout
parsing, the namespaces backend's cover planning, and the safe workdir helpers."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from practicum.envs.sandbox import Limits, SandboxError, read_workdir_file
from practicum.envs.sandbox.bwrap import read_status as bwrap_status
from practicum.envs.sandbox.cgroups import Hierarchy, parse_layout
from practicum.envs.sandbox.namespaces import blocked_ancestor
from practicum.envs.sandbox.namespaces import read_status as namespaces_status
from practicum.envs.sandbox.output import BoundedOutput
from practicum.envs.sandbox.runner import killed_reason
from practicum.envs.sandbox.workdir import prepare_workdir, sandbox_uid, write_script


def test_output_below_limit_is_kept_whole():
    out = BoundedOutput(10)
    out.feed(b"abc")
    out.feed(b"def")
    assert out.text() == "abcdef"
    assert out.dropped == 0


def test_output_keeps_head_and_tail_and_counts_the_cut():
    out = BoundedOutput(6)  # head 3, tail 3
    for chunk in (b"ab", b"cdefg", b"hij"):
        out.feed(chunk)
    assert out.total == 10
    assert out.text() == "abc\n...[truncated 4 bytes]...\nhij"


def test_output_memory_is_bounded_by_the_limit():
    out = BoundedOutput(100)
    for _ in range(1000):
        out.feed(b"x" * 10_000)
    assert len(out.head) + len(out.tail) == 100
    assert out.dropped == 10_000_000 - 100


def test_output_invalid_utf8_is_replaced():
    out = BoundedOutput(10)
    out.feed(b"ok\xff")
    assert out.text() == "ok\ufffd"


def test_killed_reason_priorities():
    assert killed_reason(None, True, 1, 0.0, 5) == "timeout"
    assert killed_reason(0, False, 1, 0.0, 5) == "memory"  # a child was OOM-killed
    assert killed_reason(-signal.SIGXCPU, False, 0, 5.0, 5) == "cpu"
    assert killed_reason(-signal.SIGKILL, False, 0, 6.1, 5) == "cpu"  # hard RLIMIT_CPU
    assert killed_reason(-signal.SIGKILL, False, 0, 0.2, 5) == "signal 9"
    assert killed_reason(-signal.SIGXFSZ, False, 0, 0.0, 5) == "file_size"
    assert killed_reason(1, False, 0, 0.0, 5) is None
    assert killed_reason(0, False, 0, 0.0, 5) is None


def test_limits_defaults_and_rlimits():
    limits = Limits(wall_seconds=2.5, memory_mb=100, file_size_mb=3, max_processes=7)
    assert limits.cpu_limit == 8  # ceil(2.5 + 5)
    assert Limits(cpu_seconds=1.2).cpu_limit == 2
    r = limits.rlimits()
    assert r["RLIMIT_AS"] == (100 * 2**20, 100 * 2**20)
    assert r["RLIMIT_CPU"] == (8, 9)
    assert r["RLIMIT_FSIZE"] == (3 * 2**20, 3 * 2**20)
    assert r["RLIMIT_NPROC"] == (7, 7)
    assert r["RLIMIT_CORE"] == (0, 0)


def test_limits_reject_non_positive_values():
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=0)
    with pytest.raises(ValueError, match="cpu_seconds"):
        Limits(cpu_seconds=-1)


MIXED_MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:6 - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/pids rw,relatime shared:8 - cgroup cgroup rw,pids
33 25 0:29 / /sys/fs/cgroup/systemd rw,relatime shared:9 - cgroup cgroup rw,name=systemd
34 25 0:30 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
40 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
"""
MIXED_CGROUP = """\
9:name=systemd:/
8:pids:/
4:memory:/jobs/abc
1:cpu:/
0::/
"""


def test_parse_layout_v1_controllers_and_v2_mount():
    found = parse_layout(MIXED_MOUNTINFO, MIXED_CGROUP)
    assert Hierarchy(Path("/sys/fs/cgroup/memory/jobs/abc"), 1, frozenset({"memory"})) in found
    assert Hierarchy(Path("/sys/fs/cgroup/pids"), 1, frozenset({"pids"})) in found
    v2 = [h for h in found if h.version == 2]
    assert [h.parent for h in v2] == [Path("/sys/fs/cgroup/unified")]
    assert not any(h.parent.name in ("cpu", "systemd") for h in found)


def test_parse_layout_pure_v2_with_mount_root_and_escapes():
    mountinfo = "35 24 0:30 /ci /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    found = parse_layout(mountinfo, "0::/ci/job.scope\n")
    assert found == [
        Hierarchy(Path("/sys/fs/my cgroup/job.scope"), 2, frozenset({"memory", "pids"}))
    ]


def test_blocked_ancestor_finds_the_outermost_closed_folder(tmp_path: Path):
    outer = tmp_path / "outer"
    inner = outer / "inner"
    target = inner / "python"
    target.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(outer, 0o700)
    os.chmod(inner, 0o700)
    uid = 2_500_000
    found = blocked_ancestor(target, uid)
    assert found is not None and found in (
        outer,
        *outer.parents,
    )  # tmp_path's parents may be 0700 too
    os.chmod(outer, 0o755)
    os.chmod(inner, 0o755)
    assert blocked_ancestor(target, uid) in (None, *tmp_path.parents, tmp_path)


def test_backend_status_parsing():
    assert namespaces_status("started\nwait_status 768\n").returncode == 3
    assert namespaces_status("started\nwait_status 9\n").returncode == -9
    assert namespaces_status("error cannot create namespaces: EPERM\n").error.startswith("cannot")
    assert not namespaces_status("started\n").finished
    text = '{ "child-pid": 12, "mnt-namespace": 4 }\n{ "exit-code": 137 }\n'
    assert bwrap_status(text).returncode == -9  # 128 + SIGKILL
    assert bwrap_status('{ "child-pid": 12 }\n{ "exit-code": 3 }').returncode == 3
    assert not bwrap_status('{ "child-pid": 12 }').finished


def test_sandbox_uid_is_stable_and_unprivileged(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert sandbox_uid(a) == sandbox_uid(a)
    assert sandbox_uid(a) != sandbox_uid(b)
    assert sandbox_uid(a) >= 2_000_000


def test_write_script_replaces_a_planted_symlink(tmp_path: Path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (workdir / "main.py").symlink_to(victim)
    write_script(workdir, "main.py", "print(1)")
    assert victim.read_text() == "precious"
    assert not (workdir / "main.py").is_symlink()
    assert (workdir / "main.py").read_text() == "print(1)"
    with pytest.raises(SandboxError, match="plain file name"):
        write_script(workdir, "../evil.py", "")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_prepare_workdir_never_chowns_through_symlinks(tmp_path: Path):
    workdir = tmp_path / "w"
    (workdir / "sub").mkdir(parents=True)
    (workdir / "sub" / "data.csv").write_text("a,b\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (workdir / "link_dir").symlink_to(outside)
    (workdir / "link_file").symlink_to(outside / "secret")
    uid = sandbox_uid(workdir)
    prepare_workdir(workdir, uid)
    assert (workdir / "sub" / "data.csv").stat().st_uid == uid
    assert os.lstat(workdir / "link_file").st_uid == uid  # the link itself
    assert (outside / "secret").stat().st_uid == 0
    assert outside.stat().st_uid == 0
    assert workdir.stat().st_mode & 0o777 == 0o700


def test_read_workdir_file_refuses_symlinks_and_non_files(tmp_path: Path):
    (tmp_path / "secret.csv").write_text("answers")
    workdir = tmp_path / "w"
    (workdir / "out").mkdir(parents=True)
    (workdir / "out" / "submission.csv").write_text("id,y\n")
    (workdir / "link.csv").symlink_to(tmp_path / "secret.csv")
    (workdir / "linkdir").symlink_to(tmp_path)
    assert read_workdir_file(workdir, "out/submission.csv") == b"id,y\n"
    with pytest.raises(OSError):
        read_workdir_file(workdir, "link.csv")
    with pytest.raises(OSError):
        read_workdir_file(workdir, "linkdir/secret.csv")
    with pytest.raises(ValueError, match="not a regular file"):
        read_workdir_file(workdir, "out")
    with pytest.raises(ValueError, match="more than"):
        read_workdir_file(workdir, "out/submission.csv", max_bytes=2)
    with pytest.raises(ValueError, match="relative path"):
        read_workdir_file(workdir, "../secret.csv")


def test_no_usable_backend_error_names_every_reason(monkeypatch: pytest.MonkeyPatch):
    from practicum.envs.sandbox import runner

    monkeypatch.setattr(runner, "_problem", lambda name: f"{name} is broken")
    with pytest.raises(
        SandboxError, match="bwrap: bwrap is broken; namespaces: namespaces is broken"
    ):
        runner._choose("auto")
    with pytest.raises(SandboxError, match="'bwrap' does not work here: bwrap is broken"):
        runner._choose("bwrap")


@pytest.mark.parametrize("status_fd", [3, 4, 9, 12])
def test_bwrap_options_fd_never_replaces_the_status_fd(status_fd: int):
    """Regression: options read from a fixed fd 9 clobbered a status pipe that happened to be
    fd 9 ('bwrap: Write to info_fd: Bad file descriptor', an environment failure)."""
    from practicum.envs.sandbox.bwrap import _hide_options

    argv = _hide_options(["bwrap", "--ro-bind", "/usr", "/usr"], status_fd)
    script, path = argv[2], argv[4]
    options_fd = int(script.split("--args ")[1].split()[0])
    assert options_fd != status_fd and 3 <= options_fd <= 9
    assert f"exec {options_fd}<" in script
    assert Path(path).read_bytes() == b"--ro-bind\0/usr\0/usr\0"
    os.unlink(path)
