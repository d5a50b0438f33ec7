"""AIDE (aideml 0.2.2, in its own venv) runs a bundled MLE competition against `practicum
serve`: its plan-and-code calls and its forced `submit_review` tool calls are answered by the
served policy, and whatever it submits is graded by practicum's grader."""

import json

import pytest

from .conftest import build_long_tiny_model, save_run

pytestmark = [pytest.mark.slow]


def test_aide_runs_a_bundled_competition_through_practicum_serve(tmp_path):
    from practicum.serve.agents import agent_python, run_aide
    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served

    python = agent_python("aide")  # creates .venv-aide on first use (about a minute)
    run = save_run(build_long_tiny_model(tmp_path / "tiny"), tmp_path / "runs" / "calc")
    served = load_served(run, dtype="float32")
    try:
        with ServerThread(build_app(served)) as url:
            result = run_aide(
                url,
                "calc",
                "iris-species",
                tmp_path / "aide",
                steps=1,
                data_root=tmp_path / "mle",
                python=python,
                exec_timeout=30,
            )
    finally:
        served.close()
    assert result.returncode == 0, result.log_tail
    assert served.server.prompts >= 2  # plan-and-code, then the review, through the engine
    (node,) = result.journal
    # The review came back as a submit_review call AIDE could parse: its summary is the node's
    # analysis. A random model writes no working code, so the node is buggy and unscored.
    assert isinstance(node["analysis"], str) and node["is_buggy"] is True
    assert result.submission is None and result.report is None
    assert (tmp_path / "aide" / "data" / "train.csv").is_file()
    assert not (tmp_path / "aide" / "data" / "answers.csv").exists()  # private answers stay out
    json.dumps(result.journal)
