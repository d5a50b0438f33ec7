"""Tables piped to a file keep every cell whole (copyable ids), whatever the terminal width."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")


def piped(argv: list[str]) -> str:
    """stdout of `practicum ARGV` run with stdout a pipe and no COLUMNS hint."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "practicum.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "argv, ids",
    [
        (
            ["mle", "list"],
            [
                "breast-cancer-diagnosis",
                "health-insurance-visits",
                "python-docs-chapters",
                "school-math-pass-rate",
            ],
        ),
        (["swe", "list"], None),
    ],
)
def test_piped_listing_keeps_whole_ids(argv, ids):
    out = piped(argv)
    assert "…" not in out
    if ids is None:  # the bundled SWE suite: every instance id, whole
        from practicum.envs.swe.instance import load_instances
        from practicum.tasks.swe import bundled_instances_path

        ids = [i.instance_id for i in load_instances(bundled_instances_path())]
    for task_id in ids:
        assert task_id in out


def test_a_reader_that_leaves_early_gets_no_traceback():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)  # gone before a line is written
    reader.wait(timeout=30)
    done = subprocess.run(
        [sys.executable, "-m", "practicum.cli", "envs", "--options"],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,
    )
    reader.stdin.close()
    assert done.returncode == 141
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
