"""The environments' side of an outside agent: a scripted agent (no model call) fixes the toy
SWE repository or writes an MLE submission in the sandbox, and the environment grades what it
left with its own grader (FULL rule; the competition's grader on the private answers)."""

import pytest
from transformers import AutoTokenizer

from practicum.agent.endpoint import AgentEndpoint
from practicum.agent.runner import AgentEpisode
from practicum.config import AgentConfig
from practicum.engine.chat import ChatFormat
from practicum.engine.service import ModelService  # rules only: no live model here
from practicum.envs.base import Task
from practicum.envs.registry import SuiteContext, build_suite

pytestmark = pytest.mark.slow

FIX = (
    "import pathlib\np = pathlib.Path('calc/ops.py')\n"
    "p.write_text(p.read_text().replace('return a - b', 'return a + b'))\n"
)
CONSTANT = "import shutil\nshutil.copy('data/sample_submission.csv', 'submission.csv')\n"


@pytest.fixture(scope="module")
def endpoint(tiny_model_dir):
    """An endpoint no call reaches (the scripted agents never ask the model)."""
    chat = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))
    ep = AgentEndpoint(None, chat, "toy", max_seq_len=512, learner_temperature=1.0).start()
    yield ep
    ep.stop()


def run_script(env, task, endpoint, tmp_path, program):
    script = tmp_path / "agent.py"
    script.write_text(program)
    cfg = AgentConfig(command=["python", str(script)], time_limit_s=60)
    return AgentEpisode(env, task, "g", 0, endpoint, cfg, seed=0, failure_reward=-1.0).run()


def test_a_swe_agent_that_fixes_the_bug_is_graded_resolved(endpoint, tmp_path):
    from practicum.envs.swe.toy_repo import write_toy_instance

    write_toy_instance(tmp_path, repos={"toy__other-1": "toy/other"})
    suite = build_suite(
        "swe",
        {"instances": str(tmp_path / "toy.jsonl"), "held_out_packages": ["other"]},
        SuiteContext(),
    )
    fixed = run_script(suite.make_env(None), Task("toy__calc-1"), endpoint, tmp_path, FIX)
    assert fixed.failure is None and fixed.solved and fixed.reward == 1.0, fixed.failure
    assert "return a + b" in fixed.info["patch"]
    idle = run_script(suite.make_env(None), Task("toy__calc-1"), endpoint, tmp_path, "pass\n")
    assert idle.failure is None and not idle.solved and idle.reward == 0.0


def test_an_mle_agent_submission_is_graded_on_the_private_answers(endpoint, tmp_path):
    suite = build_suite(
        "mle", {"held_out": ["iris-species"], "train": ["wine-cultivar"]}, SuiteContext()
    )
    task = suite.eval_tasks[0]
    e = run_script(suite.make_env(ModelService()), task, endpoint, tmp_path, CONSTANT)
    assert e.failure is None and e.info["valid"] and e.solved, e.info
    assert e.reward == pytest.approx(e.metrics["score_credit"])  # a valid run: its score
    e = run_script(suite.make_env(ModelService()), task, endpoint, tmp_path, "pass\n")
    assert not e.info["valid"] and e.reward == -10.0  # the env's failure reward
