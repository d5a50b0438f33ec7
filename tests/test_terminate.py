"""SIGTERM unwinds the process (practicum.terminate), so `kill` leaves no work folder behind;
every benchmark that runs practicum code installs it."""

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from practicum.terminate import Terminated, unwind_on_sigterm

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys, tempfile, time
if sys.argv[1] == "unwind":
    from practicum.terminate import unwind_on_sigterm
    unwind_on_sigterm()
with tempfile.TemporaryDirectory(prefix="practicum-work-") as d:
    print(d, flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("mode", ["unwind", "default"])
def test_sigterm_removes_the_work_folder_only_when_it_unwinds(mode, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    if mode == "unwind":
        assert not folder.exists()
    else:  # what the handler is for: the default action leaves the folder on disk
        assert proc.returncode == -signal.SIGTERM and folder.is_dir()
        shutil.rmtree(folder)


def test_a_handler_already_installed_is_kept():
    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        unwind_on_sigterm()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_terminated_is_no_exception_an_episode_would_swallow():
    assert issubclass(Terminated, KeyboardInterrupt) and not issubclass(Terminated, Exception)


def test_every_benchmark_that_runs_practicum_unwinds_on_sigterm():
    """_trl_grpo_iteration.py runs in TRL's venv without practicum; vs_trl.py stops it."""
    missing = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        text = path.read_text()
        guard = re.search(r'^if __name__ == "__main__":\n(.*)', text, re.M | re.S)
        if (
            guard
            and path.name != "_trl_grpo_iteration.py"
            and "unwind_on_sigterm()" not in guard.group(1)
        ):
            missing.append(path.name)
    assert not missing
