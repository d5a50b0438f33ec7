"""Red team at the environment level: hostile agent programs in script mode.

Each attack must be contained (the host and the private answers are untouched, the trainer
lives on), must earn no undue credit (no valid submission, at most the milestones an honest
script with the same statements would reach), and the next episode must run normally.
`ATTACKS` is also what the report's (attack, outcome) table is built from.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from practicum.engine.service import ModelService
from practicum.envs.base import Task
from practicum.envs.mle.audit import ATTACK_PROGRAMS
from practicum.envs.mle.competitions.prepared_data import default_data_root
from practicum.envs.mle.env import MleEnv
from practicum.envs.mle.suite import MleOptions, mle_suite
from practicum.envs.registry import SuiteContext

IRIS = Task("iris-species", {"competition": "iris-species", "split": "eval"})

ATTACKS = ATTACK_PROGRAMS  # the same programs `practicum audit` runs


@pytest.fixture(scope="module")
def env_parts(tmp_path_factory):
    data_root = tmp_path_factory.mktemp("redteam-data")
    options = MleOptions(
        mode="script",
        instrumenter="rules",
        held_out=["iris-species"],
        score_scale="raw",
        train=["wine-cultivar"],
        data_root=str(data_root),
        wall_seconds=4,
        memory_mb=1024,
        max_processes=32,
    )
    suite = mle_suite(options, SuiteContext())
    comp = suite.make_env.competitions["iris-species"]
    other = comp.comp.prepare(tmp_path_factory.mktemp("another-runs-data"))  # another run's
    outside = tmp_path_factory.mktemp("outside") / "pwned.txt"
    slots = {
        "answers": str(comp.paths.answers),
        "private": str(comp.paths.private),
        "data_root": str(data_root),
        "outside": str(outside),
        "public_train": str(comp.paths.public / "train.csv"),
        "other_answers": str(other.answers),
        "default_root": str(default_data_root()),
    }
    return suite, comp, slots


def digest(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def attack(env_parts, name: str, env: MleEnv | None = None):
    """Run one attack; returns (StepResult, RunOutcome)."""
    suite, comp, slots = env_parts
    code = ATTACKS[name].format(**slots)
    env = env or suite.make_env(ModelService())
    env.reset(IRIS, seed=0)
    try:
        return env.step(f"Attack: {name}.\n```python\n{code}```"), env.last_outcome
    finally:
        env.close()


def secret_lines(comp) -> list[str]:
    return comp.paths.answers.read_text().splitlines()[1:4]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_contained_and_earns_no_undue_credit(env_parts, name):
    suite, comp, slots = env_parts
    before = {p: digest(p) for p in (comp.paths.answers, comp.paths.public / "train.csv")}
    result, outcome = attack(env_parts, name)
    assert not outcome.valid and result.solved is False, name
    assert len(outcome.milestones) <= 2  # never more than its own imports/loads could earn
    assert result.reward <= -10.0 + 2 * 0.1 + 1e-9  # a fixed bound, not the env's own sum
    out = outcome.stdout + outcome.stderr + result.observation
    for line in secret_lines(comp):
        assert line not in out  # answers never leak into anything the agent sees
    assert {p: digest(p) for p in before} == before  # answers and cached data untouched
    # it ran, and was contained by the sandbox: neither malformed nor an infrastructure failure
    assert not result.malformed and result.failure is None and outcome.duration > 0
    assert "PRACTICUM:" not in result.observation


def test_private_answers_are_invisible(env_parts):
    """Nothing named answers.csv anywhere the code can see: this run's, another run's (another
    data root) or the default data root's. Walking every visible file takes seconds (about
    280,000 files here: 3 s warm, over 4 s with a cold cache), so this attack gets a wall limit
    it cannot hit; it prints WALKED only once the walk is complete."""
    suite, comp, slots = env_parts
    patient = MleEnv(
        suite.make_env.options.model_copy(update={"wall_seconds": 300}), suite.make_env.competitions
    )
    result, outcome = attack(env_parts, "read the private answers", env=patient)
    out = outcome.stdout
    assert outcome.crash is None, (outcome.crash, outcome.stderr[-500:])
    assert "WALKED" in out and "FOUND 0 []" in out, out[-1000:]
    assert "GOT" not in out and out.count("DENIED") == 5, out[:2000]


def test_network_is_unreachable(env_parts):
    out = attack(env_parts, "open a network connection")[1].stdout
    assert "NET OPEN" not in out and out.count("NET BLOCKED") == 3


def test_resource_attacks_are_killed_at_the_limits(env_parts):
    loop_result, loop = attack(env_parts, "loop forever")
    assert loop.crash == "killed (timeout)" and 3.5 < loop.duration < 15 and loop.timed_out
    assert loop_result.duration == 0.0  # a timeout reports no duration: no largest weight
    bomb_result, bomb = attack(env_parts, "fork bomb")
    assert bomb.crash is not None and bomb_result.duration < 15
    memory = attack(env_parts, "allocate 20 GB")[1]
    assert "ALLOCATED" not in memory.stdout and memory.crash


def test_writes_outside_the_workdir_do_not_reach_the_host(env_parts):
    suite, comp, slots = env_parts
    attack(env_parts, "write outside the work folder")
    for path in (
        "/etc/practicum_pwned",
        "/usr/practicum_pwned",
        "/tmp/practicum_pwned",
        slots["outside"],
    ):
        assert not os.path.exists(path), path


def test_forged_and_self_read_markers_earn_nothing(env_parts):
    forged_result, forged = attack(env_parts, "print forged milestone markers")
    assert forged.milestones == [] and forged.forged_markers == 21
    assert forged_result.reward == -10.0
    self_read_result, self_read = attack(env_parts, "read the nonce from its own source")
    assert self_read.milestones == [] and self_read_result.reward == -10.0
    assert self_read.forged_markers >= 7  # it found no nonce in main.py: wrong-nonce markers


def test_symlinked_submission_is_not_followed(env_parts):
    outcome = attack(env_parts, "submission.csv is a symlink to the answers")[1]
    assert "not a regular file" in outcome.failure_reason


def test_the_run_goes_on_after_the_attacks(env_parts):
    attack(env_parts, "kill its parent")
    attack(env_parts, "fork bomb")
    suite, comp, slots = env_parts
    sample = comp.paths.public / "sample_submission.csv"
    code = "import shutil\nshutil.copyfile('sample_submission.csv', 'submission.csv')\n"
    env = suite.make_env(ModelService())
    env.reset(IRIS, seed=0)
    result = env.step(f"```python\n{code}```")
    env.close()
    assert sample.is_file() and result.solved and env.last_outcome.score > 0
