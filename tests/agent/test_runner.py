"""One outside agent's episode: how the task reaches it, how the episode ends, who grades it."""

import sys

import pytest

from practicum.config import load_config
from practicum.runtime.session import open_session

from .conftest import agent_overrides

pytestmark = pytest.mark.slow

GRADER = """
from practicum.envs.base import StepResult

def grade(task, outcome):
    text = (outcome.workdir / "out.txt").read_text()
    return StepResult(reward=len(text) / 100, done=True, info={"seen": text,
                      "replies": len(outcome.replies)})
"""
STDIN_AGENT = """
import sys, time
task = sys.stdin.read()
open("out.txt", "w").write("task:" + task[:20])
open("done.flag", "w").write("")
time.sleep(60)  # the submit file ends the episode long before this
"""


def test_stdin_task_a_submit_file_and_a_users_grader(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "my_grader.py").write_text(GRADER)
    (tmp_path / "stdin_agent.py").write_text(STDIN_AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(
        None,
        agent_overrides(
            tiny_model_dir,
            tmp_path,
            "rollout.agent.task_input=stdin",
            f"rollout.agent.command=[python, {tmp_path / 'stdin_agent.py'}]",
            "rollout.agent.submit_file=done.flag",
            "rollout.agent.grader=my_grader:grade",
        ),
    )
    s = open_session(cfg)
    try:
        (e,) = s.rollout([(s.suite.train_tasks[0], "g0/t", 0)])
    finally:
        s.close()
    prompt = s.suite.train_tasks[0].data["prompt"]
    assert e.failure is None and e.info["submitted"] is True, e.failure
    assert e.info["seen"] == "task:" + prompt[:20] and e.reward == len(e.info["seen"]) / 100
    assert e.info["seconds"] < 30 and e.turns == []  # stopped at the flag, no call made
    assert "my_grader" in sys.modules
