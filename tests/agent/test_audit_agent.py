"""`practicum audit` of an agent config: every attack program, run as the agent in the same
sandbox against the same endpoint, is contained; a leaky variant (the network shared) is caught."""

import pytest

from practicum.audit.agents import run_agent_audit
from practicum.config import load_config

from .conftest import agent_overrides

pytestmark = pytest.mark.slow

LIMITS = [
    "rollout.agent.time_limit_s=8",
    "rollout.agent.max_calls=40",
    "rollout.agent.max_call_tokens=16",
    "rollout.agent.max_episode_tokens=16",
]


def test_every_agent_attack_is_contained_and_leaves_nothing(tiny_model_dir, tmp_path):
    cfg = load_config(None, agent_overrides(tiny_model_dir, tmp_path, *LIMITS))
    report = run_agent_audit(cfg, tasks=1)
    verdicts = {r.attack: r.verdict for r in report.results}
    assert verdicts.pop("honest reference") == "reference"
    assert set(verdicts.values()) == {"contained"}, {
        r.attack: r.unmet + r.leftovers for r in report.results if r.verdict != "contained"
    }
    assert len(verdicts) == 10 and report.ok
    assert not list(tmp_path.glob("**/escaped.txt"))


def test_an_agent_sharing_the_host_network_is_caught(tiny_model_dir, tmp_path, monkeypatch):
    """With the sandbox's network namespace left shared, the host listener is reached."""
    import practicum.envs.sandbox.bwrap as bwrap

    hide = bwrap._hide_options  # bwrap's options travel in a file: drop one on its way there
    monkeypatch.setattr(
        bwrap, "_hide_options", lambda args, fd: hide([a for a in args if a != "--unshare-net"], fd)
    )
    cfg = load_config(None, agent_overrides(tiny_model_dir, tmp_path, *LIMITS))
    report = run_agent_audit(cfg, tasks=1, only=["network"])
    (result,) = report.results[1:]
    assert result.verdict == "left something behind" and not report.ok
