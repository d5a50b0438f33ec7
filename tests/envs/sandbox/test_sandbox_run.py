"""Ordinary sandboxed runs on every usable backend: output, files, exit codes, environment."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from practicum.envs.sandbox import (
    Limits,
    SandboxError,
    available_backends,
    cgroups,
    run_command,
    run_python,
)

FAST = Limits(wall_seconds=10, output_bytes=2000)


def test_script_prints_and_writes_in_the_workdir(backend: str, workdir: Path):
    (workdir / "train.csv").write_text("x,y\n1,2\n")
    code = (
        "import os\nprint('rows', len(open('train.csv').read().splitlines()))\n"
        "open('out.txt', 'w').write('done')\n"
    )
    r = run_python(code, workdir, FAST, backend=backend)
    assert r.ok, r
    assert r.stdout == "rows 2\n"
    assert r.stderr == ""
    assert r.backend == backend
    assert (workdir / "out.txt").read_text() == "done"
    assert (workdir / "main.py").read_text() == code


def test_exit_codes_and_signals(backend: str, workdir: Path):
    r = run_python("import sys; sys.exit(3)", workdir, FAST, backend=backend)
    assert (r.returncode, r.ok, r.killed_reason, r.timed_out) == (3, False, None, False)
    r = run_python("raise ValueError('boom')", workdir, FAST, backend=backend)
    assert r.returncode == 1 and "ValueError: boom" in r.stderr
    r = run_python(
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)", workdir, FAST, backend=backend
    )
    assert (r.returncode, r.killed_reason) == (-15, "signal 15")


def test_cancel_event_kills_the_tree_early(backend: str, workdir: Path):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    code = "import subprocess, time\nsubprocess.Popen(['sleep', '60'])\ntime.sleep(60)\n"
    r = run_python(code, workdir, Limits(wall_seconds=60), backend=backend, cancel=cancel)
    assert (r.killed_reason, r.timed_out, r.returncode, r.ok) == ("cancelled", False, None, False)
    assert r.duration < 10


def test_missing_command_is_an_exit_code_not_an_error(backend: str, workdir: Path):
    r = run_command(["no-such-program-xyz"], workdir, FAST, backend=backend)
    assert r.returncode == 127 and "no-such-program-xyz" in r.stderr


def test_venv_interpreter_and_its_packages(backend: str, workdir: Path):
    code = (
        "import sys, numpy, pandas\n"
        "print(sys.executable)\nprint(sys.prefix)\n"
        "print(pandas.DataFrame({'a': numpy.arange(4)})['a'].sum())\n"
    )
    r = run_python(code, workdir, FAST, backend=backend)
    assert r.ok, r.stderr
    assert r.stdout.splitlines() == [sys.executable, sys.prefix, "6"]


def test_environment_is_clean_and_extendable(
    backend: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PRACTICUM_TEST_SECRET", "hunter2")
    code = (
        "import os; print(os.environ.get('PRACTICUM_TEST_SECRET'), os.environ['FOO'], "
        "os.environ['HOME'], os.getcwd())"
    )
    r = run_python(code, workdir, FAST, env={"FOO": "bar"}, backend=backend)
    assert r.stdout.split() == ["None", "bar", "/tmp", str(workdir.resolve())]


def test_stdin_is_passed(backend: str, workdir: Path):
    r = run_python(
        "import sys; print(sys.stdin.read()[::-1])", workdir, FAST, stdin="abc", backend=backend
    )
    assert r.stdout == "cba\n"
    r = run_python("import sys; print(repr(sys.stdin.read()))", workdir, FAST, backend=backend)
    assert r.stdout == "''\n"


def test_output_is_truncated_exactly(backend: str, workdir: Path):
    code = (
        "import sys; sys.stdout.write('a' * 10 + 'b' * 1_000_000 + 'c' * 10); "
        "sys.stderr.write('e' * 50)"
    )
    r = run_python(code, workdir, Limits(wall_seconds=10, output_bytes=20), backend=backend)
    assert r.ok
    assert r.stdout == "a" * 10 + "\n...[truncated 1000000 bytes]...\n" + "c" * 10
    assert r.stderr == "e" * 10 + "\n...[truncated 30 bytes]...\n" + "e" * 10


def test_shell_commands_run(backend: str, workdir: Path):
    r = run_command(
        ["sh", "-c", "echo hi > f.txt && cat f.txt && id -u"], workdir, FAST, backend=backend
    )
    assert r.ok, r.stderr
    lines = r.stdout.split()
    assert lines[0] == "hi"
    if os.geteuid() == 0:
        assert int(lines[1]) != 0  # never root inside


def test_files_from_an_earlier_step_stay_writable(backend: str, workdir: Path):
    assert run_python("open('state.txt', 'w').write('1')", workdir, FAST, backend=backend).ok
    (workdir / "added_by_env.txt").write_text("from the trusted side")
    code = "open('state.txt', 'a').write('2'); open('added_by_env.txt', 'a').write('!')"
    r = run_python(code, workdir, FAST, backend=backend)
    assert r.ok, r.stderr
    assert (workdir / "state.txt").read_text() == "12"


def test_concurrent_runs_from_threads(backend: str, tmp_path: Path):
    results = {}

    def one(i: int) -> None:
        d = tmp_path / f"w{i}"
        d.mkdir()
        results[i] = run_python(f"print({i} * 2)", d, FAST, backend=backend)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: r.stdout for i, r in results.items()} == {i: f"{i * 2}\n" for i in range(4)}


def test_no_cgroup_is_left_behind(backend: str, workdir: Path):
    run_python("print(1)", workdir, FAST, backend=backend)
    for h in cgroups.layout():
        assert not list(h.parent.glob(f"{cgroups.PREFIX}{os.getpid()}-*"))


def test_set_up_errors_are_sandbox_errors(tmp_path: Path, workdir: Path):
    if not available_backends():
        pytest.skip("no sandbox backend is usable on this machine")
    with pytest.raises(SandboxError, match="not a directory"):
        run_python("print(1)", tmp_path / "missing", FAST)
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        run_python("print(1)", workdir, FAST, backend="chroot")
    with pytest.raises(SandboxError, match="contains the workdir"):
        run_python("print(1)", workdir, FAST, hidden_paths=[tmp_path])
    with pytest.raises(SandboxError, match="is shared"):
        run_command(["true"], Path("/tmp"), FAST)
