"""AIDE runs the scripts it writes itself, so `run_aide` confines the whole agent: a script
written by an adversarial policy cannot read the private answers or write outside its folder,
yet still reaches the endpoint on loopback."""

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
    from practicum.serve.agents import confined

    private = tmp_path / "data" / "private"
    private.mkdir(parents=True)
    (private / "answers.csv").write_text("id,label\n1,SECRET-LABEL\n")
    key = tmp_path / "key.bin"
    key.write_text("SECRET-KEY")
    work = tmp_path / "work"
    work.mkdir()
    with socket.socket() as server:  # the endpoint the agent must still reach
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        script = (
            "import pathlib, socket\n"
            f"for p in [{str(private / 'answers.csv')!r}, {str(key)!r}]:\n"
            "    try:\n        print('read', pathlib.Path(p).read_text())\n"
            "    except OSError as e:\n        print('denied', e.errno)\n"
            "pathlib.Path('mine.txt').write_text('ok')\n"
            f"try:\n    pathlib.Path({str(PROBE)!r}).write_text('no')\n"
            "except OSError as e:\n    print('outside', e.errno)\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
            "print('connected')\n")
        try:
            done = subprocess.run(confined([sys.executable, "-c", script], work,
                                           (private, key)), capture_output=True, text=True,
                                  timeout=60)
        finally:
            written = PROBE.exists()
            PROBE.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr
    assert "SECRET" not in done.stdout and done.stdout.count("denied") == 2, done.stdout
    assert "outside 30" in done.stdout and not written  # EROFS: the host is read-only
    assert "connected" in done.stdout
    assert (work / "mine.txt").read_text() == "ok"
