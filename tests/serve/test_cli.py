"""`practicum serve RUN --port P` from the command line, answered by the openai client."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import practicum
from practicum.serve.http import free_port


def test_practicum_serve_command_serves_a_run_folder(tiny_run):
    from openai import OpenAI

    port = free_port()
    src = str(Path(practicum.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "practicum.cli", "serve", str(tiny_run),
                             "--port", str(port), "--dtype", "float32", "--name", "mine"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["mine", "mine-base"]
        r = client.chat.completions.create(model="mine", max_tokens=3, temperature=0,
                                           messages=[{"role": "user", "content": "hello"}])
        assert r.usage.completion_tokens == 3
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert "mine, mine-base on http://127.0.0.1" in out
