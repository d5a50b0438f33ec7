"""MleEnv end to end on a real competition: sandboxed runs, milestones, grading, rewards, the
step contract (malformed, failure, solved, metrics), self-improvement prompts, attempts,
instrumenters. Script-mode programs use only the standard library so each run takes a fraction
of a second; one template-mode test runs scikit-learn."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from practicum.engine.service import Completion, ModelService
from practicum.envs.base import Task
from practicum.envs.mle import env as env_module
from practicum.envs.mle.actions import prompts
from practicum.envs.mle.credit.outcome import RunOutcome
from practicum.envs.mle.credit.rule_instrumenter import rule_instrument
from practicum.envs.mle.suite import MleOptions, mle_suite
from practicum.envs.registry import SuiteContext
from practicum.envs.sandbox import SandboxError

IRIS = Task("iris-species", {"competition": "iris-species", "split": "eval"})
IRIS_TRAIN = Task("iris-species", {"competition": "iris-species", "split": "train"})
ENV_FAILURE_REWARD = -5.0
"""rollout.failure_reward of these suites: distinct from the MLE failure reward (-10)."""
SERVICE = ModelService()  # no server: enough for the rules


def make_suite(data_root: Path, **options):
    values = {
        "mode": "script",
        "instrumenter": "rules",
        "held_out": ["iris-species"],
        "train": ["wine-cultivar"],
        "data_root": str(data_root),
        "wall_seconds": 20,
        "score_scale": "raw",
        "reuse_runs": False,  # every step a run of its own; reuse has its own tests
        **options,
    }
    return mle_suite(MleOptions(**values), SuiteContext(failure_reward=ENV_FAILURE_REWARD))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mle-env-data")


@pytest.fixture(scope="module")
def suite(data_root):
    return make_suite(data_root)


@pytest.fixture(scope="module")
def answers(suite) -> pd.DataFrame:
    return suite.make_env.competitions["iris-species"].answers


def block(code: str) -> str:
    return f"I will write the known labels.\n```python\n{code}\n```"


def perfect_script(answers: pd.DataFrame) -> str:
    truth = dict(zip(answers["id"].astype(str), answers["species"]))
    return (
        "import csv\n"
        "rows = list(csv.DictReader(open('test.csv')))\n"
        f"truth = {truth!r}\n"
        "with open('submission.csv', 'w') as f:\n"
        "    f.write('id,species\\n')\n"
        "    for r in rows:\n"
        "        f.write(r['id'] + ',' + truth[r['id']] + '\\n')\n"
    )


def run(suite, reply: str, task: Task = IRIS, service=SERVICE):
    env = suite.make_env(service)
    env.reset(task, seed=0)
    try:
        return env, env.step(reply)
    finally:
        env.close()


def test_perfect_submission_earns_score_plus_milestones(suite, answers):
    env, result = run(suite, block(perfect_script(answers)))
    outcome = env.last_outcome
    assert isinstance(outcome, RunOutcome) and outcome.valid and outcome.score == 1.0
    # imports, data loaded (open test.csv), predictions written (open submission.csv 'w')
    assert outcome.milestones == ["libraries_imported", "data_loaded", "predictions_written"]
    assert result.reward == pytest.approx(1.0 + 3 * 0.1) == pytest.approx(outcome.reward.total)
    b = outcome.reward
    assert (b.failure, b.milestone_credit, b.score_credit) == pytest.approx((0.0, 0.3, 1.0))
    assert result.done and result.solved is True
    assert not result.malformed and result.failure is None
    assert result.metrics == pytest.approx(
        {
            "headline/valid": 1.0,
            "milestones": 3.0,
            "score_credit": 1.0,
            "attempts": 1.0,
            "malformed": 0.0,
            "improve_prompt": 0.0,
        }
    )
    assert result.duration > 0 and result.duration == outcome.duration
    assert result.info["valid"] and result.info["reward"]["total"] == pytest.approx(1.3)
    assert "Submission valid" in result.observation and "PRACTICUM" not in result.observation


def test_workdir_holds_only_the_public_files(suite):
    code = "import os\nprint(sorted(os.listdir('.')))\n"
    _, result = run(suite, block(code))
    assert (
        "['main.py', 'sample_submission.csv', 'test.csv', 'train.csv']"
        in result.info["stdout_tail"]
    )


def test_unparsable_reply_is_malformed_not_a_failure(suite):
    env, result = run(suite, "I think a random forest would be nice.")
    assert result.malformed and result.failure is None
    assert result.reward == -10.0 and result.done and result.duration == 0.0
    assert result.solved is False and result.metrics["malformed"] == 1.0
    assert result.metrics["headline/valid"] == 0.0
    assert env.last_outcome.parse_error.startswith("no ```python code block")
    assert result.info["failure_reason"] == "unparsable reply"
    assert "could not be run" in result.observation and "```python" in result.observation


def test_sandbox_failure_is_a_failure_with_the_runs_failure_reward(suite, answers, monkeypatch):
    def broken(*args, **kwargs):
        raise SandboxError("no sandbox backend works on this machine")

    monkeypatch.setattr(env_module, "run_python", broken)
    monkeypatch.setattr(env_module, "run_instrumented", broken)
    env, result = run(suite, block(perfect_script(answers)))
    assert result.done and result.failure.startswith("sandbox error: no sandbox backend")
    assert result.reward == ENV_FAILURE_REWARD and not result.malformed
    assert result.solved is False and env.last_outcome.infra_error is not None


def test_crash_keeps_milestones_reached_before_it(suite):
    env, result = run(suite, block("import csv\nraise RuntimeError('boom')\n"))
    outcome = env.last_outcome
    assert outcome.milestones == ["libraries_imported"]
    assert result.reward == pytest.approx(-10.0 + 0.1) and result.solved is False
    assert result.metrics["milestones"] == 1.0 and not result.malformed
    assert outcome.crash == "exit code 1" and result.failure is None
    assert "no submission.csv" in outcome.failure_reason
    assert "RuntimeError: boom" in result.observation


def test_partial_credit_off_gives_the_bare_failure_reward(data_root):
    off = make_suite(data_root, partial_credit=False)
    env, result = run(off, block("import csv\nraise RuntimeError('boom')\n"))
    assert env.last_outcome.milestones == ["libraries_imported"] and result.reward == -10.0


def test_wrong_row_count_is_an_invalid_submission(suite):
    env, result = run(
        suite, block("import csv\nopen('submission.csv', 'w').write('id,species\\n0,setosa\\n')\n")
    )
    assert not env.last_outcome.valid and "45" in env.last_outcome.failure_reason
    # predictions_written needs one row per test row: only the import counts
    assert result.reward == pytest.approx(-10.0 + 0.1)
    assert env.last_outcome.unproven == ["predictions_written"]


def test_template_mode_runs_the_filled_script(data_root):
    tmpl = make_suite(data_root, mode="template")
    env = tmpl.make_env(SERVICE)
    start = env.reset(IRIS, seed=0)
    system, *examples, user = start.messages
    assert system == {"role": "system", "content": prompts.LINE_SYSTEM_PROMPT}
    assert examples == list(prompts.LINE_EXAMPLE_MESSAGES) and user["role"] == "user"
    assert start.stop_strings == ["\n"]  # the reply is one line: its turn ends at the break
    result = env.step("Sure: `model = LogisticRegression(max_iter=500)` works well.")
    env.close()
    assert result.info["valid"] and len(result.info["milestones"]) == 7
    assert result.reward == pytest.approx(result.info["score"] + 0.7)
    assert result.info["solution"]["code"] == "model = LogisticRegression(max_iter=500)"


def test_template_mode_line_stop_can_be_turned_off_and_other_modes_have_none(data_root, suite):
    env = make_suite(data_root, mode="template", line_stop=False).make_env(SERVICE)
    assert env.reset(IRIS, seed=0).stop_strings == []
    env.close()
    env = suite.make_env(SERVICE)  # script mode: a plan and a whole script, many lines
    assert env.reset(IRIS, seed=0).stop_strings == []
    env.close()


def test_script_mode_starts_with_system_and_user_only(suite):
    env = suite.make_env(SERVICE)
    system, user = env.reset(IRIS, seed=0).messages
    assert system == {"role": "system", "content": prompts.SYSTEM_PROMPT}
    assert "Iris" in user["content"] and "```python" in user["content"]


def test_improve_prompts_show_a_stored_solution_on_training_tasks_only(data_root, answers):
    s = make_suite(data_root, improve_prob=1.0)
    env = s.make_env(SERVICE)
    env.reset(IRIS_TRAIN, seed=0)
    assert env.prompt_mode == "scratch"  # nothing stored yet
    assert env.step(block(perfect_script(answers))).info["valid"]
    env.close()
    prompt = env.reset(IRIS_TRAIN, seed=0).messages[-1]["content"]
    assert env.prompt_mode == "improve"
    assert "Here is a previous solution; its test score was 1" in prompt and "truth = {" in prompt
    assert env.step("no code").metrics["improve_prompt"] == 1.0
    env.reset(IRIS, seed=0)  # held-out: always from scratch, never stored
    assert env.prompt_mode == "scratch"
    env.close()


def improvable(data_root, answers):
    """A suite whose buffer holds a valid iris solution (improving possible), and an env."""
    s = make_suite(data_root, improve_prob=0.5)
    env = s.make_env(SERVICE)
    env.reset(IRIS_TRAIN, seed=0)
    assert env.step(block(perfect_script(answers))).info["valid"]
    env.close()
    return s, env


def test_the_seed_decides_the_prompt_mode(data_root, answers):
    s, env = improvable(data_root, answers)

    def modes(env):
        out = []
        for seed in range(16):
            env.reset(IRIS_TRAIN, seed)
            out.append(env.prompt_mode)
        return out

    first, again = modes(env), modes(s.make_env(SERVICE))
    assert first == again and {"scratch", "improve"} == set(first)


def test_the_members_of_a_group_share_one_prompt(data_root, answers):
    """A GRPO group is samples of one prompt: whatever each member's seed, and although the
    buffer gains solutions while the group runs, every member shows the first one's choice."""
    _, env = improvable(data_root, answers)

    def prompts_of(group, seeds):
        out = []
        for seed in seeds:
            start = env.reset(replace(IRIS_TRAIN, group=group), seed)
            out.append((env.prompt_mode, start.messages[-1]["content"]))
            env.close()
        return out

    groups = [prompts_of(f"g{i}/iris-species", range(i * 8, i * 8 + 8)) for i in range(8)]
    assert all(len(set(members)) == 1 for members in groups)
    assert {members[0][0] for members in groups} == {"scratch", "improve"}
    # outside a group (SFT, evaluation tools) each seed draws for itself, as before
    lone = prompts_of(None, range(16))
    assert len({mode for mode, _ in lone}) == 2


def test_previous_solution_given_by_the_task_is_shown(suite):
    previous = {
        "code": "model = Ridge()",
        "output": "validation rmse: 3",
        "score": None,
        "reward": -9.7,
        "valid": False,
    }
    env = suite.make_env(SERVICE)
    start = env.reset(
        Task(
            "iris-species", {"competition": "iris-species", "split": "eval", "previous": previous}
        ),
        seed=0,
    )
    prompt = start.messages[-1]["content"]
    assert env.prompt_mode == "improve" and "it produced no valid submission" in prompt
    assert "model = Ridge()" in prompt


def test_several_attempts_show_the_run_and_keep_the_best_reward(data_root, answers):
    s = make_suite(data_root, attempts=2)
    env = s.make_env(SERVICE)
    env.reset(IRIS, seed=0)
    first = env.step(block(perfect_script(answers)))
    assert not first.done and first.solved is None and "Improve your solution" in first.observation
    second = env.step("no code this time")
    assert second.done and second.malformed and second.reward == pytest.approx(1.3)  # the best
    assert second.solved is True  # the first attempt was valid
    assert second.metrics["attempts"] == 2.0 and second.metrics["malformed"] == 1.0
    assert second.metrics["headline/valid"] == 1.0 and second.metrics["milestones"] == 3.0
    env.close()


class ScriptedClient:
    """A frozen-model stand-in answering the instrumenter's prompt with `answer(code, nonce)`."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def complete(self, messages, params=None):
        self.calls.append((messages, params))
        prompt = messages[-1]["content"]
        code = prompt.rsplit("```python\n", 1)[1].rsplit("```", 1)[0]
        nonce = prompt.split("[[PRACTICUM:", 1)[1].split(":", 1)[0]
        return Completion("```python\n" + self.answer(code, nonce) + "```", [], "stop")


class OneClientService:
    def __init__(self, client):
        self.client_ = client

    def client(self, spec):
        return self.client_


def test_llm_instrumenter_rewrite_is_used_when_it_only_adds_prints(data_root, answers):
    llm_suite = make_suite(data_root, instrumenter="base")
    honest = ScriptedClient(rule_instrument)  # inserts the markers correctly
    tampering = ScriptedClient(  # changes the code itself: must be rejected
        lambda code, nonce: rule_instrument(code, nonce).replace("truth[r['id']]", "'setosa'")
    )
    for client, method in ((honest, "llm"), (tampering, "rules")):
        env, result = run(
            llm_suite, block(perfect_script(answers)), service=OneClientService(client)
        )
        assert env.last_outcome.instrumenter == method and env.last_outcome.score == 1.0
        assert result.metrics["llm_instrumented"] == (1.0 if method == "llm" else 0.0)
    assert env.last_outcome.instrument_rejected == "rewrite changes more than marker prints"
    messages, params = honest.calls[0]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert params.temperature == 0.0 and 0 < params.max_new_tokens <= 2048


def test_kill_stops_the_run_in_progress_and_grades_nothing(suite, answers):
    """Shutdown calls kill() from another thread: the sandboxed script (here a perfect one that
    first sleeps past any test timeout) stops at once and earns nothing."""
    env = suite.make_env(SERVICE)
    env.reset(IRIS, seed=0)
    threading.Timer(1.0, env.kill).start()
    try:
        result = env.step(block("import time\ntime.sleep(60)\n" + perfect_script(answers)))
    finally:
        env.close()
    assert result.done and result.failure == "cancelled by kill()"
    assert result.duration < 15 and result.reward == ENV_FAILURE_REWARD
    assert env.last_outcome.infra_error == "cancelled"


def test_step_before_reset_is_a_bug(suite):
    with pytest.raises(RuntimeError, match="before reset"):
        suite.make_env(SERVICE).step("x")


def test_concurrent_episodes_use_separate_workdirs(suite, answers):
    results = []

    def one():
        results.append(run(suite, block(perfect_script(answers)))[1])

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.info["score"] for r in results] == [1.0, 1.0, 1.0]


def test_threads_grading_at_once_never_see_a_half_loaded_grader():
    from practicum.envs.mle.competitions import mlebench_compat
    from practicum.envs.mle.competitions.loading import load_competition

    comp = load_competition("school-math-pass-rate")
    errors: list[Exception] = []

    def load():
        try:
            comp._callable("grader.grade_fn", "grade:grade")
        except Exception as err:  # before the fix: "grade.py defines no 'grade'"
            errors.append(err)

    for _ in range(10):
        mlebench_compat.forget_folder(comp.root)
        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_base_instrumenter_is_the_live_policy_with_its_adapter_off(
    data_root, answers, tiny_model_dir
):
    """The default instrumenter ("base") goes through the run's generation server with the
    adapter off: no second copy of the weights, batched with the policy's requests. A tiny
    random model writes garbage, so the rules mark the run; the cost is recorded."""
    from practicum.engine import service as service_module
    from practicum.engine.chat import ChatFormat
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.engine.server import GenerationServer

    trainable, sampler = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    server = GenerationServer(sampler).start()
    calls = []
    generate = server.generate
    server.generate = lambda ids, params, seed=None, adapter=True: (
        calls.append((len(ids), params.max_new_tokens, adapter))
        or generate(ids, params, seed, adapter)
    )
    local_before = dict(service_module._LOCAL)
    try:
        live = ModelService(server, ChatFormat(trainable.tokenizer))
        suite = make_suite(data_root, instrumenter="base", instrumenter_max_new_tokens=16)
        env, result = run(suite, block(perfect_script(answers)), service=live)
    finally:
        server.stop()
    assert [(c[1], c[2]) for c in calls] == [(16, False)]  # one greedy call, adapter off
    assert service_module._LOCAL == local_before  # no local copy was loaded
    outcome = env.last_outcome
    assert outcome.instrumenter == "rules" and outcome.instrument_rejected
    assert 0 < outcome.instrument_tokens <= 16 and outcome.instrument_seconds > 0
    assert result.metrics["instrument_seconds"] == outcome.instrument_seconds
    assert outcome.score == 1.0
