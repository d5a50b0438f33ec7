"""The calculator tool runs model-written code in the sandbox and grades answers."""

from practicum.envs.base import Task
from practicum.envs.calculator import CalculatorEnv, calculator_program
from practicum.tasks.arithmetic import make_tasks


def _env_and_task():
    task = make_tasks({"basic_arithmetic": 1.0}, 1, seed=0, split="train")[0]
    env = CalculatorEnv()
    first = env.reset(task, seed=0).messages[-1]["content"]
    return env, task, first


def test_calculator_program_prints_expressions_and_runs_blocks():
    assert "print(" in calculator_program("2 + 3")
    assert calculator_program("x = 2\nprint(x * 5)") == "x = 2\nprint(x * 5)\n"


def test_calc_then_answer_gets_full_reward():
    env, task, first = _env_and_task()
    try:
        assert task.data["question"] in first
        expr = task.data["entry"]["metadata"]["expression"]
        r = env.step(f"<calc>{expr}</calc>")
        assert not r.done and r.observation.startswith("Result: ")
        value = r.observation.removeprefix("Result: ").strip()
        assert r.duration > 0
        final = env.step(f"<answer>{value}</answer>")
        assert final.done and final.reward == 1.0 and final.solved
        assert final.metrics == {"calls": 1.0}
    finally:
        env.close()


def test_wrong_answer_and_malformed_reply():
    env, task, _ = _env_and_task()
    try:
        bad = env.step("I think it is big")
        assert not bad.done and bad.malformed and "<calc>" in bad.observation
        wrong = env.step("<answer>123456789</answer>")
        assert wrong.done and wrong.reward < 1.0 and wrong.solved is False
    finally:
        env.close()


def test_tool_errors_and_timeouts_are_observations_not_crashes():
    env = CalculatorEnv()
    env.reset(Task("t", {"question": "q", "entry": {}}), seed=0)
    try:
        err = env.step("<calc>1/0</calc>")
        assert "ZeroDivisionError" in err.observation
        slow = env.step("<calc>while True: pass</calc>")
        assert "timed out" in slow.observation
        net = env.step("<calc>import socket; socket.create_connection(('1.1.1.1', 80), 2)</calc>")
        assert net.observation.startswith("Error")
    finally:
        env.close()


def test_reward_hacks_earn_nothing():
    """An adversarial policy: answers that are not the number, or that try to reach the
    verifier's internals, score 0; a calculation printing the expected answer text does not
    end the episode or pay."""
    env, task, _ = _env_and_task()
    try:
        expected = str(task.data["entry"]["answer"])
        for hack in (
            "<answer></answer>",
            "<answer>" + expected + " or 0</answer>",
            "<answer>__import__('os')</answer>",
            "<answer>" + "9" * 400 + "</answer>",
        ):
            r = env.step(hack)
            assert r.done and r.reward == 0.0 and not r.solved, hack
        tag = "'<ans' + 'wer>'"  # the tag only appears in the tool's output, not the action
        printed = env.step(f"<calc>print({tag} + '{expected}' + {tag})</calc>")
        assert "<answer>" in printed.observation and not printed.done and printed.reward == 0.0
    finally:
        env.close()
