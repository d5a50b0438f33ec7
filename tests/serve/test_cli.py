"""`practicum serve RUN --port P` from the command line, answered by the openai client; a stop
signal ends a busy server at once; a bad or busy port fails in one line before the model loads."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import practicum
from practicum.cli import main
from practicum.serve.http import free_port


def test_practicum_serve_command_serves_a_run_folder_and_stops_busy_on_sigterm(tiny_run):
    from openai import OpenAI

    port = free_port()
    src = str(Path(practicum.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "practicum.cli",
            "serve",
            str(tiny_run),
            "--port",
            str(port),
            "--dtype",
            "float32",
            "--name",
            "mine",
            "--api-key",
            "k1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.25)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k1", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["mine", "mine-base"]
        r = client.chat.completions.create(
            model="mine",
            max_tokens=3,
            temperature=0,
            messages=[{"role": "user", "content": "hello"}],
        )
        assert r.usage.completion_tokens == 3
        busy = client.completions.create(
            model="mine", prompt="Once", max_tokens=900, temperature=0, stream=True
        )
        received = 0
        for _chunk in busy:  # a reply of 900 tokens is under way
            received += 1
            if received == 3:
                proc.send_signal(signal.SIGTERM)
                stopped = time.monotonic()
                break
        proc.wait(timeout=30)
        # the engine stops at its next step; uvicorn then waits at most its grace period
        assert time.monotonic() - stopped < 10
    finally:
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate()
    assert "mine, mine-base on http://127.0.0.1" in out
    assert "Traceback" not in out


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_fails_in_one_line_before_loading(port, capsys):
    assert main(["serve", "no-such-model-folder", "--port", port]) == 2
    out, err = capsys.readouterr()
    assert err == f"practicum: serve: --port {port} is out of range (0 to 65535)\n"
    assert out == ""


def test_a_port_in_use_fails_in_one_line_before_serving(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "no-such-model-folder", "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"practicum: serve: cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1 and "in use" in err
    assert out == ""
