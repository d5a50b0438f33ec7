"""Sampler replicas (`placement.engine.replicas`, `practicum.runtime.replicas`) on a local Ray
with two HF engine actors: rows spread over both and drawn as one sampler draws them, every
replica holds the published version, and a replica killed mid-call or mid-run loses no row and
no episode."""

import os
import signal
import threading
import time

import pytest
import ray

from practicum.config import load_config
from practicum.engine.base import Sample, SamplerFailure, SamplingParams
from practicum.engine.hf import PolicyConfig, load_hf_engine
from practicum.engine.options import HFOptions
from practicum.errors import ConfigError
from practicum.runtime.replicas import EngineReplicas, cut_row_args, shard_rows
from practicum.store import EpisodeStore
from tests.runtime.test_ray_engine import assert_same, bandit_run, draws, trained_update


def test_rows_are_cut_evenly_the_largest_shard_to_the_least_loaded_replica():
    assert shard_rows(5, [0, 0]) == [(0, range(0, 3)), (1, range(3, 5))]
    assert shard_rows(5, [4, 1]) == [(1, range(0, 3)), (0, range(3, 5))]
    assert shard_rows(1, [2, 0, 1]) == [(1, range(0, 1))]  # one row: one replica, no empties
    assert shard_rows(0, [0, 0]) == []


def test_per_row_arguments_travel_with_their_rows_and_others_pass_unchanged():
    seeds, kwargs = cut_row_args(
        3, range(1, 3), [7, 8, 9], {"grammar": ["a", None, "c"], "note": "all", "pair": [1, 2]}
    )
    assert seeds == [8, 9]
    assert kwargs == {"grammar": [None, "c"], "note": "all", "pair": [1, 2]}
    assert cut_row_args(3, range(0, 1), None, {})[0] is None


class StandIn:
    """A replica with a fixed draw per (prompt, seed); `fails` raises SamplerFailure like a
    replica whose actor died twice or timed out."""

    def __init__(self, fails: bool = False):
        self.fails, self.calls = fails, []

    def generate(self, prompts, params, seeds=None, adapter=True, **kwargs):
        self.calls.append((len(prompts), seeds, kwargs))
        if self.fails:
            raise SamplerFailure("engine actor died during generate (pid 1)")
        return [
            Sample([sum(p), s or 0], [0.0, 0.0], "", "stop")
            for p, s in zip(prompts, seeds or [None] * len(prompts))
        ]


def test_a_shard_whose_replica_fails_reruns_on_another_and_row_arguments_follow_rows():
    good, bad = StandIn(), StandIn(fails=True)
    router = EngineReplicas([bad, good])
    try:
        out = router.generate(
            [[1], [2], [3]], SamplingParams(), [7, 8, 9], grammar=["a", "b", "c"], note="all"
        )
        assert [s.token_ids for s in out] == [[1, 7], [2, 8], [3, 9]]  # in the callers' order
        assert bad.calls == [(2, [7, 8], {"grammar": ["a", "b"], "note": "all"})]
        assert sorted(good.calls) == [
            (1, [9], {"grammar": ["c"], "note": "all"}),
            (2, [7, 8], {"grammar": ["a", "b"], "note": "all"}),
        ]
        assert router.served == [0, 3] and router._loads == [0, 0]
    finally:
        router.close()
    alone = EngineReplicas([StandIn(fails=True)])
    with pytest.raises(SamplerFailure):  # nowhere else to go: the call fails as a whole
        alone.generate([[1]], SamplingParams(), [1])
    alone.close()


def test_replicas_are_engine_actors():
    """Replicas exist only as engine actors of a Ray plan: elsewhere the key is unknown."""
    cfg = load_config(None, ["placement.kind=ray", "placement.engine.replicas=2"])
    assert cfg.placement.engine.replicas == 2 and cfg.placement.engine.gpus == 0
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.engine: unknown key for "
        r"placement.kind=local",
    ):
        load_config(None, ["placement.engine.replicas=2"])
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.engine.replicas: Input "
        r"should be greater than or equal to 1",
    ):
        load_config(None, ["placement.kind=ray", "placement.engine.replicas=0"])


def actor_version(engine) -> int:
    """The version the actor itself holds (not the driver's record)."""
    return ray.get(
        engine.handle.generate.remote([[1, 2]], SamplingParams(max_new_tokens=1), None, True)
    )[1]


@pytest.mark.usefixtures("local_ray")
def test_two_replicas_draw_like_one_sampler_hold_one_version_and_survive_a_kill(tiny_model_dir):
    policy = PolicyConfig(model=str(tiny_model_dir), dtype="float32", lora_r=4, lora_alpha=8)
    trainable, local = load_hf_engine(policy)
    replicas = EngineReplicas.start(HFOptions(), policy, n=2, cpus=0, timeout=60)
    try:
        a, b = replicas.replicas
        assert len({a.pid, b.pid, os.getpid()}) == 3
        update = trained_update(trainable, 3)
        local.load_weights(update)
        replicas.load_weights(update)
        trained_update(trainable, 4)  # the published copy, not a live view, was loaded
        assert replicas.version == 3 and [actor_version(r) for r in (a, b)] == [3, 3]

        prompts = [[1, 2, 3, 4], [5, 6, 7], [1, 2, 3, 4], [9, 8], [4, 4, 4]]
        params = SamplingParams(temperature=1.0, max_new_tokens=12)
        seeds = [11, 12, 13, 14, 15]
        expected = draws(local, prompts, params, seeds)
        assert_same(draws(replicas, prompts, params, seeds), expected)
        assert replicas.served == [3, 2]  # both sampled: 3 rows to the first, 2 to the second
        assert_same(
            draws(replicas, prompts, params, seeds, adapter=False),
            draws(local, prompts, params, seeds, adapter=False),
        )

        # a replica killed while the call is in flight: its rows rerun on its replacement
        # (loaded with version 3) and the call returns the same draws
        long = SamplingParams(temperature=1.0, max_new_tokens=200)
        reference = draws(local, prompts, long, seeds)
        result = {}
        call = threading.Thread(
            target=lambda: result.update(d=draws(replicas, prompts, long, seeds))
        )
        killed = a.pid
        call.start()
        while sum(replicas._loads) == 0 and call.is_alive():
            time.sleep(0.001)
        os.kill(killed, signal.SIGKILL)
        call.join(timeout=120)
        assert not call.is_alive()
        assert a.restarts == 1 and b.restarts == 0 and a.pid != killed  # met during this call
        assert_same(result["d"], reference)
        assert actor_version(a) == 3
        assert replicas.metrics() == {"ray_engine_restarts": 1.0}
        s = replicas.summary()["ray_engine"]
        assert s["version"] == 3 and s["engine_restarts"] == 1 and len(s["replicas"]) == 2
    finally:
        replicas.close()
    assert ray.is_initialized()  # joined the module's Ray: not its to stop


@pytest.mark.usefixtures("local_ray")
def test_a_run_with_two_replicas_samples_like_one_and_a_killed_replica_loses_no_episode(
    tiny_model_dir, tmp_path, monkeypatch, train_run
):
    """The same sync run with the engine in the driver and in two replica actors, one of them
    killed after the first publish: every episode is stored once with no failure, sampled at
    the version the driver published, with the same tokens as the driver's run."""
    real_load = EngineReplicas.load_weights
    killed = []

    def load_then_kill(self, update):
        real_load(self, update)
        if update.version == 1 and not killed:
            killed.append(self.replicas[0].pid)
            os.kill(killed[0], signal.SIGKILL)

    monkeypatch.setattr(EngineReplicas, "load_weights", load_then_kill)
    stored = {}
    for name, where in (
        ("driver", []),
        (
            "replicas",
            ["placement.kind=ray", "placement.engine.cpus=0", "placement.engine.replicas=2"],
        ),
    ):
        cfg = bandit_run(tiny_model_dir, tmp_path, name, "rollout.group_size=4", *where)
        summary = train_run(cfg)
        eps = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
        assert summary["steps"] == 2 and len({e.episode_id for e in eps}) == len(eps) == 8
        assert all(e.failure is None for e in eps)
        assert [{t.policy_version for t in e.turns} for e in eps] == [{0}] * 4 + [{1}] * 4
        stored[name] = [[t.sampled_ids for t in e.turns] for e in eps]
    assert killed
    assert summary["ray_engine"]["engine_restarts"] == 1 and summary["ray_engine"]["version"] == 2
    assert all(r["rows"] > 0 for r in summary["ray_engine"]["replicas"])
    assert stored["replicas"] == stored["driver"]
