"""mini-swe-agent (2.4.6, litellm client, in its own venv) works a bundled practicum SWE task
against `practicum serve`; its commands run in its bubblewrap environment, its diff is taken
inside practicum's sandbox and graded by practicum's grader."""

import json
import shutil

import pytest

from .conftest import build_long_tiny_model, save_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap (./dev installs it)"
    ),
]


def test_mini_swe_agent_works_a_practicum_swe_task_graded_by_practicum(tmp_path):
    from practicum.envs.swe.instance import load_instances
    from practicum.serve.agents import agent_python, run_mini_swe_agent_on_task
    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served
    from practicum.tasks.swe import bundled_instances_path

    python = agent_python("mini")  # creates .venv-mini on first use (about a minute)
    instance = next(
        i for i in load_instances(bundled_instances_path()) if i.repo.endswith("inflection")
    )
    run = save_run(build_long_tiny_model(tmp_path / "tiny"), tmp_path / "runs" / "calc")
    served = load_served(run, dtype="float32")
    try:
        with ServerThread(build_app(served)) as url:
            result, verdict = run_mini_swe_agent_on_task(
                url, "calc", instance, tmp_path / "mini", step_limit=2, python=python
            )
    finally:
        served.close()
    assert result.returncode == 0, result.log_tail
    assert served.server.prompts == 2  # both steps were answered by the served policy
    # A random model writes no bash tool call: the run ends at its step limit, untouched,
    # and practicum's grader finds the bug still there.
    assert result.exit_status == "LimitsExceeded" and result.patch == ""
    assert not verdict.resolved and verdict.fail_to_pass[0] == 0 and verdict.fail_to_pass[1] > 0
    traj = json.loads(result.trajectory.read_text())
    roles = [m["role"] for m in traj["messages"]]
    assert roles[:2] == ["system", "user"] and "exit" in roles  # task given, run ended by mini
