"""`mle evaluate`: a scratch episode, then one improving it, keep the better; the main CLI
runs it in a runtime session."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from practicum.cli import main
from practicum.engine.service import ModelService
from practicum.envs.base import Task
from practicum.envs.mle.cli.evaluate import previous_solution, scratch_then_improve
from practicum.envs.mle.suite import MleOptions, mle_suite
from practicum.envs.registry import SuiteContext

IRIS = Task("iris-species", {"competition": "iris-species", "split": "eval"})
COPY = "```python\nimport shutil\nshutil.copyfile('sample_submission.csv', 'submission.csv')\n```"


@dataclass
class Turn:
    action_text: str
    info: dict


@dataclass
class Episode:
    reward: float = 0.0
    turns: list[Turn] = field(default_factory=list)


def scripted_runner(suite, prompts: list[str]):
    """run_episodes for one-turn episodes whose reply depends on the prompt: prose from
    scratch (unparsable), a valid copy of the sample submission when improving."""

    def run_episodes(tasks, ids):
        assert len(ids) == len(tasks) and all(i.startswith("eval-") for i in ids)
        episodes = []
        for k, task in enumerate(tasks):
            env = suite.make_env(ModelService())
            prompt = env.reset(task, k).messages[-1]["content"]
            prompts.append(prompt)
            reply = COPY if "Here is a previous solution" in prompt else "A forest, I think."
            result = env.step(reply)
            env.close()
            episodes.append(Episode(result.reward, [Turn(reply, result.info)]))
        return episodes

    return run_episodes


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    options = MleOptions(
        mode="script",
        instrumenter="rules",
        held_out=["iris-species"],
        train=["wine-cultivar"],
        data_root=str(tmp_path_factory.mktemp("data")),
    )
    return mle_suite(options, SuiteContext())


def test_scratch_then_improve_keeps_the_better_attempt(suite):
    prompts: list[str] = []
    result = scratch_then_improve(scripted_runner(suite, prompts), [IRIS, IRIS])
    assert result["scratch"] == {"reward_mean": -10.0, "valid_rate": 0.0, "episodes": 2.0}
    assert result["improve"]["valid_rate"] == 1.0
    # the sample submission is the no-ML level: normalised score 0, no milestone proven
    assert result["best"]["reward_mean"] == pytest.approx(0.0, abs=1e-9)
    assert [r["kept"] for r in result["tasks"]] == ["improve", "improve"]
    assert "it produced no valid submission" in prompts[-1]
    assert "A forest, I think." in prompts[-1]


def test_previous_solution_falls_back_to_the_reply():
    episode = Episode(-10.0, [Turn("  model = Ridge(  ", {})])
    assert previous_solution(episode) == {
        "code": "model = Ridge(",
        "output": "",
        "score": None,
        "reward": -10.0,
        "valid": False,
    }
    assert previous_solution(Episode(-10.0))["code"] == ""


class FakeSession:
    """What `practicum mle evaluate` uses of a runtime session; episodes reward the improving
    attempt of every task but the first."""

    def __init__(self, run_dir, step=7):
        self.run_dir, self.closed, self.calls = run_dir, False, []
        self.learner = SimpleNamespace(step=step)
        self.server = SimpleNamespace(version=3)
        self.suite = SimpleNamespace(eval_tasks=[IRIS, Task("wine", {"competition": "wine"})])

    def rollout(self, items, temperature=None):
        self.calls.append(([gid for _, gid, _ in items], temperature))
        return [
            Episode(1.0 if "previous" in t.data and k else 0.0, [Turn("x", {"valid": True})])
            for k, (t, _, _) in enumerate(items)
        ]

    def close(self):
        self.closed = True


@pytest.fixture
def session(monkeypatch, tmp_path):
    import practicum.runtime.session as runtime_session

    fake = FakeSession(tmp_path / "run")
    monkeypatch.setattr(runtime_session, "open_session", lambda cfg: fake)
    return fake


def test_the_cli_runs_scratch_then_improve_in_a_session_and_writes_the_result(session, capsys):
    assert main(["mle", "evaluate", "task.name=mle", "eval.temperature=0.5"]) == 0
    assert session.closed
    assert session.calls == [
        (["eval-scratch/iris-species", "eval-scratch/wine"], 0.5),
        (["eval-improve/iris-species", "eval-improve/wine"], 0.5),
    ]
    result = json.loads((session.run_dir / "eval" / "improve_step_000007.json").read_text())
    assert result["policy_version"] == 3
    assert [r["kept"] for r in result["tasks"]] == ["scratch", "improve"]
    assert result["best"]["reward_mean"] == 0.5
    out = capsys.readouterr().out
    assert '"best"' in out and "improve_step_000007.json" in out


def test_the_cli_labels_the_result_and_refuses_another_task(session, capsys):
    assert main(["mle", "evaluate", "task.name=mle", "--label", "mine"]) == 0
    assert (session.run_dir / "eval" / "mine.json").exists()
    session.closed = False
    assert main(["mle", "evaluate", "task.name=toy"]) == 2
    assert "mle evaluate needs task.name=mle, got 'toy'" in capsys.readouterr().err
    assert not session.closed  # no session was opened
