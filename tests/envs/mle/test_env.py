"""MleEnv end to end on a real competition: sandboxed runs, milestones, grading, rewards,
self-improvement prompts, attempts, instrumenters. Script-mode programs use only the standard
library so each run takes a fraction of a second; one template-mode test runs scikit-learn."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pytest

from practicum.config import load_config
from practicum.envs.base import Task
from practicum.envs.mle.env import MleEnv
from practicum.envs.mle.instrument import LLMInstrumenter
from practicum.envs.mle.instrument_rules import rule_instrument
from practicum.envs.mle.instrumenters import FrozenModel, make_complete
from practicum.envs.mle.outcome import self_inspection, solution_output
from practicum.envs.mle.suite import mle_suite

IRIS = Task("iris-species", {"competition": "iris-species", "split": "eval"})
IRIS_TRAIN = Task("iris-species", {"competition": "iris-species", "split": "train"})


def make_suite(data_root: Path, **options):
    opts = {"mode": "script", "instrumenter": "rules", "held_out": ["iris-species"],
            "train": ["wine-cultivar"], "data_root": str(data_root), "wall_seconds": 20,
            **options}
    return mle_suite(load_config(None, ["task.name=mle", f"task.options={opts!r}"]))


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


def run(suite, reply: str, task: Task = IRIS):
    env = suite.make_env()
    env.reset(task)
    try:
        return env, env.step(reply)
    finally:
        env.close()


def test_perfect_submission_earns_score_plus_milestones(suite, answers):
    _, result = run(suite, block(perfect_script(answers)))
    info = result.info
    assert info["valid"] and info["score"] == 1.0
    # imports, data loaded (open test.csv), predictions written (open submission.csv 'w')
    assert info["milestones"] == ["libraries_imported", "data_loaded", "predictions_written"]
    assert result.reward == pytest.approx(1.0 + 3 * 0.1)
    assert info["reward_breakdown"] == pytest.approx(
        {"total": 1.3, "failure": 0.0, "milestone_credit": 0.3, "score_credit": 1.0})
    assert result.done and "failure" not in info
    assert result.duration > 0 and result.duration == info["duration"]
    assert "Submission valid" in result.observation and "PRACTICUM" not in result.observation


def test_workdir_holds_only_the_public_files(suite):
    code = "import os\nprint(sorted(os.listdir('.')))\n"
    _, result = run(suite, block(code))
    assert "['main.py', 'sample_submission.csv', 'test.csv', 'train.csv']" in result.info[
        "stdout_tail"]


def test_unparsable_reply_gets_failure_reward_and_clear_observation(suite):
    _, result = run(suite, "I think a random forest would be nice.")
    assert result.reward == -10.0 and result.done and result.duration == 0.0
    assert result.info["failure_reason"] == "unparsable"
    assert result.info["failure"].startswith("unparsable action")
    assert "could not be run" in result.observation and "```python" in result.observation


def test_crash_keeps_milestones_reached_before_it(suite):
    _, result = run(suite, block("import csv\nraise RuntimeError('boom')\n"))
    assert result.info["milestones"] == ["libraries_imported"]
    assert result.reward == pytest.approx(-10.0 + 0.1)
    assert result.info["crash"] == "exit code 1"
    assert "no submission.csv" in result.info["failure_reason"]
    assert "RuntimeError: boom" in result.observation


def test_partial_credit_off_gives_the_bare_failure_reward(data_root):
    off = make_suite(data_root, partial_credit=False)
    _, result = run(off, block("import csv\nraise RuntimeError('boom')\n"))
    assert result.info["milestones"] == ["libraries_imported"] and result.reward == -10.0


def test_wrong_row_count_is_an_invalid_submission(suite):
    code = "import csv\nopen('submission.csv', 'w').write('id,species\\n0,setosa\\n')\n"
    _, result = run(suite, block(code))
    assert not result.info["valid"] and "45" in result.info["failure_reason"]
    assert result.reward == pytest.approx(-10.0 + 0.2)


def test_template_mode_runs_the_filled_script(data_root):
    tmpl = make_suite(data_root, mode="template")
    env, result = run(tmpl, "Sure: `model = LogisticRegression(max_iter=500)` works well.")
    assert env.example_messages and env.system_prompt.startswith("You write one line")
    assert result.info["valid"] and len(result.info["milestones"]) == 7
    assert result.reward == pytest.approx(result.info["score"] + 0.7)
    assert result.info["solution"]["code"] == "model = LogisticRegression(max_iter=500)"


def test_improve_prompts_show_a_stored_solution_on_training_tasks_only(data_root, answers):
    s = make_suite(data_root, improve_prob=1.0)
    env = s.make_env()
    assert env.reset(IRIS_TRAIN) and env.prompt_mode == "scratch"  # nothing stored yet
    assert env.step(block(perfect_script(answers))).info["valid"]
    env.close()
    prompt = env.reset(IRIS_TRAIN)
    assert env.prompt_mode == "improve"
    assert "Here is a previous solution; its test score was 1" in prompt and "truth = {" in prompt
    env.reset(IRIS)  # held-out: always from scratch, never stored
    assert env.prompt_mode == "scratch"
    env.close()


def test_previous_solution_given_by_the_task_is_shown(suite):
    previous = {"code": "model = Ridge()", "output": "validation rmse: 3", "score": None,
                "reward": -9.7, "valid": False}
    env = suite.make_env()
    prompt = env.reset(Task("iris-species", {"competition": "iris-species", "split": "eval",
                                             "previous": previous}))
    assert env.prompt_mode == "improve" and "it produced no valid submission" in prompt
    assert "model = Ridge()" in prompt


def test_several_attempts_show_the_run_and_keep_the_best_reward(data_root, answers):
    s = make_suite(data_root, attempts=2)
    env = s.make_env()
    env.reset(IRIS)
    first = env.step(block(perfect_script(answers)))
    assert not first.done and "Improve your solution" in first.observation
    second = env.step("no code this time")
    assert second.done and second.reward == pytest.approx(1.3)  # the best attempt
    env.close()


def test_llm_instrumenter_rewrite_is_used_when_it_only_adds_prints(suite, answers):
    def honest(prompt: str) -> str:  # a "model" that inserts the markers correctly
        code = prompt.rsplit("```python\n", 1)[1].rsplit("```", 1)[0]
        nonce = prompt.split("[[PRACTICUM:", 1)[1].split(":", 1)[0]
        return "```python\n" + rule_instrument(code, nonce) + "```"

    def tampering(prompt: str) -> str:  # changes the code itself: must be rejected
        return honest(prompt).replace("truth[r['id']]", "'setosa'")

    for complete, method in ((honest, "llm"), (tampering, "rules")):
        env = MleEnv(suite.make_env.settings, suite.make_env.competitions,
                     llm=LLMInstrumenter(complete))
        env.reset(IRIS)
        result = env.step(block(perfect_script(answers)))
        env.close()
        assert result.info["instrumenter"] == method and result.info["score"] == 1.0
    assert result.info["instrument_rejected"] == "rewrite changes more than marker prints"


def test_instrumenter_specs():
    assert make_complete("rules", "m") is None
    assert callable(make_complete("openai:http://127.0.0.1:9/v1|some-model", "m"))
    local = make_complete("local:/nowhere/model", "m")
    assert isinstance(local, FrozenModel) and local is make_complete("local:/nowhere/model", "x")
    for bad in ("llm", "openai:http://x", "local:"):
        with pytest.raises(ValueError, match="task.options.instrumenter"):
            make_complete(bad, "m")


def test_frozen_model_on_a_bound_policy_disables_the_adapter_under_the_lock(tiny_model_dir):
    from contextlib import contextmanager

    from practicum.engine.hf import Policy, PolicyConfig

    policy = Policy(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    events: list[str] = []

    class Lock:
        def __enter__(self):
            events.append("lock")

        def __exit__(self, *exc):
            events.append("unlock")

    original_base, real_generate = policy.frozen_base, policy.generate

    @contextmanager
    def base():
        events.append("adapter off")
        with original_base():
            yield policy
        events.append("adapter on")

    def generate(prompts, params):
        events.append("generate")
        return real_generate(prompts, params)

    policy.frozen_base, policy.generate = base, generate
    assert isinstance(FrozenModel.from_policy(policy, Lock(), max_new_tokens=4)("x = 1"), str)
    assert events == ["lock", "adapter off", "generate", "adapter on", "unlock"]


def test_self_inspection_heuristic():
    assert self_inspection("print(open(__file__).read())") == "uses __file__"
    assert self_inspection("import sys\nprint(sys._getframe().f_code.co_consts)")
    assert self_inspection("import sys\nprint(sys.argv)") == "uses .argv"
    assert self_inspection("s = open('main.py').read()") == "mentions 'main.py'"
    assert self_inspection("model = Ridge(alpha=1.0)") is None


def test_solution_output_drops_bare_marker_lines():
    out = "[[PRACTICUM:ab12:data_loaded]]\nscore 0.9\n[[PRACTICUM:ab12:validation_scored]] value=0.9\n"
    assert solution_output(out, 200) == "score 0.9\n[milestone: validation_scored value=0.9]"


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


def test_scratch_then_improve_keeps_the_better_attempt(suite, tiny_model_dir):
    from transformers import AutoTokenizer

    from practicum.engine.base import Sample, SamplingParams
    from practicum.engine.chat import ChatFormat
    from practicum.envs.mle.evaluate import scratch_then_improve
    from practicum.runtime.rollout import RolloutLimits

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    copy = "```python\nimport shutil\nshutil.copyfile('sample_submission.csv', 'submission.csv')\n```"

    class Scripted:  # scratch: prose (unparsable); improvement: a valid copy of the sample
        version = 0
        prompts: list[str] = []

        def generate(self, prompts, params):
            out = []
            for ids in prompts:
                text = tokenizer.decode(ids)
                self.prompts.append(text)
                reply = copy if "Here is a previous solution" in text else "A forest, I think."
                tokens = tokenizer(reply, add_special_tokens=False)["input_ids"]
                out.append(Sample(tokens, [0.0] * len(tokens), reply, "stop"))
            return out

    engine = Scripted()
    result = scratch_then_improve(engine, ChatFormat(tokenizer), suite.make_env, [IRIS, IRIS],
                                  SamplingParams(), RolloutLimits(1, 2048, -10.0), 2, 0)
    assert result["scratch"] == {"reward_mean": -10.0, "valid_rate": 0.0, "episodes": 2.0}
    assert result["improve"]["valid_rate"] == 1.0
    assert result["best"]["reward_mean"] == pytest.approx(1 / 3 + 0.1)  # sample: 1/3 accuracy
    assert [r["kept"] for r in result["tasks"]] == ["improve", "improve"]
    improve_prompt = engine.prompts[-1]
    assert "it produced no valid submission" in improve_prompt
    assert "A forest, I think." in improve_prompt


def test_threads_grading_at_once_never_see_a_half_loaded_grader():
    from practicum.envs.mle import mlebench_compat
    from practicum.envs.mle.competition_registry import load_competition

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
