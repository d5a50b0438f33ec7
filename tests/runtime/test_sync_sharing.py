"""The sync runtime lends the live policy (adapter disabled) to policy_base instrumenters."""

from types import SimpleNamespace

from practicum.envs.mle.suite import MleEnvFactory
from practicum.runtime.sync import share_policy_with_envs


def _session(instrumenter: str, lora: bool):
    factory = MleEnvFactory(None, None, None, instrumenter, base_model="unused-model-spec")
    policy = SimpleNamespace(cfg=SimpleNamespace(lora=lora))
    return SimpleNamespace(suite=SimpleNamespace(make_env=factory), policy=policy), factory


def test_policy_base_instrumenter_uses_the_live_policy():
    s, factory = _session("policy_base", lora=True)
    share_policy_with_envs(s)
    complete = factory.llm().complete
    assert complete._policy is s.policy and complete._shared


def test_full_finetuning_and_other_instrumenters_keep_their_own_model():
    s, factory = _session("policy_base", lora=False)  # no adapter to disable: no frozen base
    share_policy_with_envs(s)
    assert factory._llm_built is False
    s, factory = _session("rules", lora=True)
    share_policy_with_envs(s)
    assert factory.llm() is None
