"""Judging a run from outside the sandbox: self-inspection, what the agent sees, the typed
RunOutcome."""

import json

import pytest

from practicum.envs.mle.credit.outcome import RunOutcome, self_inspection, solution_output
from practicum.envs.mle.credit.rewards import mle_reward


def outcome(**fields) -> RunOutcome:
    valid = fields.pop("valid", False)
    score = fields.pop("score", None)
    milestones = fields.pop("milestones", [])
    return RunOutcome(
        valid,
        score,
        milestones,
        mle_reward(milestones, valid, score, False),
        "accuracy",
        False,
        **fields,
    )


def test_self_inspection_heuristic():
    assert self_inspection("import sys\nprint(sys._getframe().f_code.co_consts)")
    assert self_inspection("import gc\nprint(gc.get_objects())") == "uses .get_objects"
    assert self_inspection("open('/proc/self/mem', 'rb')") == "mentions '/proc/self'"
    assert self_inspection("getattr(sys, '_getframe')") == "mentions '_getframe'"
    assert self_inspection("model = Ridge(alpha=1.0)") is None


def test_reading_its_own_file_or_argv_is_not_self_inspection():
    # the file holds only the policy's own code (the nonce never is in it: credit.launch)
    assert self_inspection("print(open(__file__).read())") is None
    assert self_inspection("import sys\nprint(sys.argv)") is None
    assert self_inspection("s = open('main.py').read()") is None


def test_solution_output_drops_bare_marker_lines():
    out = (
        "[[PRACTICUM:ab12:data_loaded]]\nscore 0.9\n"
        "[[PRACTICUM:ab12:validation_scored]] value=0.9\n"
    )
    assert solution_output(out, 200) == "score 0.9\n[milestone: validation_scored value=0.9]"


def test_info_is_json_with_output_tails():
    o = outcome(
        valid=True, score=0.9, milestones=["data_loaded"], stdout="x" * 50, stderr="warning"
    )
    info = o.info(tail_chars=10)
    assert info["stdout_tail"] == "x" * 10 and info["stderr_tail"] == "warning"
    assert "stdout" not in info and "stderr" not in info
    assert info["reward"]["total"] == pytest.approx(0.9 + 0.1)
    assert json.loads(json.dumps(info))["milestones"] == ["data_loaded"]


def test_summary_of_a_valid_run_hides_the_nonce():
    o = outcome(
        valid=True,
        score=0.93333,
        milestones=["data_loaded"],
        duration=1.25,
        stdout="[[PRACTICUM:00ff:data_loaded]]\nval acc 0.9\n",
    )
    text = o.summary(200)
    assert text.startswith("Run took 1.2 s.") and "Milestones reached (1/7): data_loaded." in text
    assert "test accuracy = 0.93333 (higher is better)" in text
    assert "val acc 0.9" in text and "00ff" not in text


def test_summary_of_a_crash_shows_the_reason_and_errors():
    o = outcome(
        failure_reason="exit code 1; no submission.csv was written",
        crash="exit code 1",
        stderr="Traceback ...\nValueError: bad",
    )
    text = o.summary(200)
    assert "ended abnormally: exit code 1." in text and "(0/7): none." in text
    assert "No valid submission: exit code 1; no submission.csv" in text
    assert "ValueError: bad" in text
