"""AIDE runs the scripts it writes itself, so `run_aide` confines the whole agent: a script
written by an adversarial policy cannot read the private answers, write outside its folder or
reach a host port, yet still reaches the endpoint through its loopback forwarder."""

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

PROBE = Path("/practicum-confined-probe")
"""A host path outside /tmp (a private tmpfs inside) that must stay read-only."""


def test_a_confined_agent_sees_no_hidden_answers_and_writes_only_its_folder(tmp_path):
    from practicum.agent.forward import UnixToTcp
    from practicum.serve.agents import confined, inner_url

    private = tmp_path / "data" / "private"
    private.mkdir(parents=True)
    (private / "answers.csv").write_text("id,label\n1,SECRET-LABEL\n")
    key = tmp_path / "key.bin"
    key.write_text("SECRET-KEY")
    work = tmp_path / "work"
    work.mkdir()
    with socket.socket() as server, socket.socket() as other:
        server.bind(("127.0.0.1", 0))  # the endpoint the agent must still reach
        server.listen(1)
        other.bind(("127.0.0.1", 0))  # any other host port (Ray's, a weight group's)
        other.listen(1)
        port, other_port = server.getsockname()[1], other.getsockname()[1]
        host, _, inner = inner_url().removeprefix("http://").partition(":")
        inner = int(inner.split("/")[0])
        script = (
            "import pathlib, socket\n"
            f"for p in [{str(private / 'answers.csv')!r}, {str(key)!r}]:\n"
            "    try:\n        print('read', pathlib.Path(p).read_text())\n"
            "    except OSError as e:\n        print('denied', e.errno)\n"
            "pathlib.Path('mine.txt').write_text('ok')\n"
            f"try:\n    pathlib.Path({str(PROBE)!r}).write_text('no')\n"
            "except OSError as e:\n    print('outside', e.errno)\n"
            f"for p in ({port}, {other_port}):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', p), timeout=5).close()\n"
            "        print('host port open', p)\n"
            "    except OSError:\n        print('host port closed')\n"
            f"with socket.create_connection(({host!r}, {inner}), timeout=5) as s:\n"
            "    s.sendall(b'ping')\n"
            "import time; time.sleep(1)\n"
            "print('connected')\n"
        )
        try:
            with UnixToTcp("127.0.0.1", port) as endpoint:
                done = subprocess.run(
                    confined([sys.executable, "-c", script], work, (private, key), Path(endpoint)),
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                server.settimeout(10)
                conn, _ = server.accept()  # the bytes reached the host's endpoint
                with conn:
                    got = conn.recv(16)
        finally:
            written = PROBE.exists()
            PROBE.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr
    assert "SECRET" not in done.stdout and done.stdout.count("denied") == 2, done.stdout
    assert "outside 30" in done.stdout and not written  # EROFS: the host is read-only
    assert done.stdout.count("host port closed") == 2, done.stdout  # the network is unshared
    assert "connected" in done.stdout and got == b"ping"  # through the forwarder and socket
    assert (work / "mine.txt").read_text() == "ok"


def test_venvs_along_the_interpreters_symlinks_stay_visible(tmp_path):
    """An agent's venv made from practicum's venv links its python to that one; with the
    checkout under /tmp (a private tmpfs inside) both venvs must be bound, and practicum's
    own interpreter folders for the forwarder."""
    from practicum.envs.sandbox.plan import python_roots
    from practicum.serve.agents import interpreter_folders

    outer, inner = tmp_path / "venv a", tmp_path / "venv b"
    for venv in (outer, inner):
        (venv / "bin").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (outer / "bin" / "python").symlink_to(sys.executable)
    (inner / "bin" / "python").symlink_to(outer / "bin" / "python")
    folders = interpreter_folders(str(inner / "bin" / "python"))
    assert {outer, inner} <= set(folders)
    assert set(python_roots()) <= set(folders)
