"""mini-swe-agent (2.4.6, litellm client, in its own venv) works a repository task against
`practicum serve`; its commands run in its bubblewrap environment, and the run leaves a
trajectory and the repository's diff for a SWE grader."""

import json
import shutil
import subprocess

import pytest

from .conftest import build_long_tiny_model, save_run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap "
                                 "(./dev installs it)")]


def test_mini_swe_agent_queries_practicum_serve_and_leaves_a_trajectory(tmp_path):
    from practicum.serve.agents import agent_python, run_mini_swe_agent
    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served

    python = agent_python("mini")  # creates .venv-mini on first use (about a minute)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n"
                                       "    assert add(2, 3) == 5\n")
    subprocess.run("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit "
                   "-qm init", shell=True, cwd=repo, check=True)
    run = save_run(build_long_tiny_model(tmp_path / "tiny"), tmp_path / "runs" / "calc")
    served = load_served(run, dtype="float32")
    try:
        with ServerThread(build_app(served)) as url:
            result = run_mini_swe_agent(url, "calc", repo, "Fix add() in calc.py so "
                                        "test_calc.py passes.", tmp_path / "mini",
                                        step_limit=2, python=python)
    finally:
        served.close()
    assert result.returncode == 0, result.log_tail
    assert served.server.prompts == 2  # both steps were answered by the served policy
    # A random model writes no bash tool call: the run ends at its step limit, untouched.
    assert result.exit_status == "LimitsExceeded" and result.patch == ""
    traj = json.loads(result.trajectory.read_text())
    roles = [m["role"] for m in traj["messages"]]
    assert roles[:2] == ["system", "user"] and "exit" in roles  # task given, run ended by mini
