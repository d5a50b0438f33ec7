"""The sampler and the learner in Ray actors (`placement.engine` / `placement.learner`) on
a local Ray: the same tokens and log-probs as the in-driver sampler for the same seeds and
published weights, a killed or timed-out engine is replaced by one holding the last weights, and
a short real training run with both in actors trains like one in the driver."""

import os
import signal
import time
from dataclasses import replace

import pytest
import ray
import torch

from practicum.config import load_config
from practicum.engine.base import SamplingParams
from practicum.engine.hf import HFEngineCopy, PolicyConfig, load_hf_engine
from practicum.engine.options import HFOptions
from practicum.errors import ConfigError
from practicum.store import EpisodeStore, read_ledger

pytestmark = pytest.mark.usefixtures("local_ray")


def trained_update(trainable, version: int):
    """The trainable's weights after a fake update: every LoRA B set to seeded random values
    (B starts at zero, which would make the adapter a no-op)."""
    g = torch.Generator().manual_seed(version)
    with torch.no_grad():
        for name, p in trainable.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return trainable.export_weights(version)


def draws(sampler, prompts, params, seeds, adapter=True):
    out = sampler.generate(prompts, params, seeds, adapter=adapter)
    return [s.token_ids for s in out], [s.logprobs for s in out], [s.finish_reason for s in out]


def assert_same(a, b):
    assert a[0] == b[0] and a[2] == b[2]
    for x, y in zip(a[1], b[1]):  # float rounding: 1.1e-5 seen on a CPU with AVX-512 BF16
        assert x == pytest.approx(y, abs=3e-5)


def test_the_actor_samples_like_the_driver_sampler_and_is_replaced_when_killed_or_hung(
    tiny_model_dir,
):
    from practicum.runtime.ray_engine import EngineFailure, RayEngine

    policy = PolicyConfig(model=str(tiny_model_dir), dtype="float32", lora_r=4, lora_alpha=8)
    trainable, local = load_hf_engine(policy)
    engine = RayEngine(HFOptions(), policy, cpus=1, timeout=60)
    try:
        assert engine.pid != os.getpid() and engine.version == 0
        update = trained_update(trainable, 3)
        local.load_weights(update)
        engine.load_weights(update)
        # the trainable changes on: the actor must hold the published copy, not a live view
        trained_update(trainable, 4)
        assert engine.version == 3
        prompts = [[1, 2, 3, 4], [5, 6, 7], [1, 2, 3, 4]]
        params = SamplingParams(temperature=1.0, max_new_tokens=12)
        seeds = [11, 12, 13]
        adapted = draws(engine, prompts, params, seeds)
        assert_same(adapted, draws(local, prompts, params, seeds))
        # the adapter matters, so the comparison above saw the published weights
        base = draws(engine, prompts, params, seeds, adapter=False)
        assert base[0] != adapted[0]
        assert_same(base, draws(local, prompts, params, seeds, adapter=False))
        nucleus = replace(params, top_p=0.8, stop_token_ids=(adapted[0][0][3],))
        assert_same(draws(engine, prompts, nucleus, seeds), draws(local, prompts, nucleus, seeds))

        # a killed actor: a fresh one takes over with the last published weights, and the
        # call runs there
        killed = engine.pid
        os.kill(killed, signal.SIGKILL)
        assert_same(draws(engine, prompts, params, seeds), adapted)
        assert engine.restarts == 1 and engine.pid != killed and engine.version == 3
        # a call that runs past the timeout: the actor is killed, a fresh one takes over, and
        # the call fails as a whole (no per-row retry)
        old = engine.pid
        engine.timeout = 0.02
        with pytest.raises(
            EngineFailure,
            match=rf"engine generate timed out after 0.02 s "
            rf"\(pid {old}\)",
        ) as hung:
            engine.generate([[1, 2, 3]] * 4, SamplingParams(max_new_tokens=400), [1, 2, 3, 4])
        assert hung.type is EngineFailure  # not retried, unlike a death
        engine.timeout = 60
        assert engine.restarts == 2 and engine.pid != old and engine.version == 3
        wait_gone(old)
        assert_same(draws(engine, prompts, params, seeds), adapted)
        assert engine.metrics() == {"ray_engine_restarts": 2.0}
    finally:
        engine.close()
    assert ray.is_initialized()  # the engine joined the module's Ray: not its to stop


def test_an_engine_holding_its_own_peft_copy_samples_like_the_trainables_sampler(tiny_model_dir):
    """The actor's engine without the merged copy (peft layers, adapter set from the published
    tensors), used in-process as with a learner actor: the same draws as the sampler sharing
    the trainable's module, adapter on and off."""
    policy = PolicyConfig(
        model=str(tiny_model_dir), dtype="float32", lora_r=4, lora_alpha=8, merged_sampling=False
    )
    trainable, local = load_hf_engine(policy)
    held = HFEngineCopy(policy)
    assert not held.shares_trainable(True) and not held.shares_trainable(False)
    update = trained_update(trainable, 5)
    local.load_weights(update)
    held.load_weights(update)
    assert held.version == 5
    prompts, seeds = [[1, 2, 3, 4], [9, 8]], [21, 22]
    params = SamplingParams(temperature=0.7, max_new_tokens=10)
    adapted = draws(held, prompts, params, seeds)
    assert_same(adapted, draws(local, prompts, params, seeds))
    base = draws(held, prompts, params, seeds, adapter=False)
    assert base[0] != adapted[0]
    assert_same(base, draws(local, prompts, params, seeds, adapter=False))


def test_ray_placement_options_are_checked():
    from practicum.runtime.ray_learner import RayLearner

    for key in ("engine", "learner"):  # actors are sections of a Ray plan only
        with pytest.raises(
            ConfigError,
            match=f"^config error at placement.{key}: unknown key for placement.kind=local",
        ):
            load_config(None, [f"placement.{key}.cpus=0"])
    # vLLM takes its weights from a learner in Ray actors too; a sharded one streams them
    for plan, streams in (
        (["placement.kind=ray", "placement.learner.cpus=0"], False),
        (["placement.kind=learner_group", "placement.ranks=2"], True),
    ):
        cfg = load_config(
            None, [*plan, "engine.kind=vllm", "engine.weight_sync=broadcast", "model.lora=false"]
        )
        assert cfg.streams_weights is streams
    # the trainable only exists in the learner actor: refused by name (e.g. by `practicum rft`)
    remote = RayLearner.__new__(RayLearner)
    with pytest.raises(
        ConfigError, match="placement.learner: the trainable lives in the learner actor"
    ):
        _ = remote.trainable


def bandit_run(model_dir, out, name: str, *extra: str):
    """Full fine-tuning of the tiny model on the in-process timed bandit (no step time), two
    steps of one group of two."""
    arms = "{a: {reward: 0.0, seconds: 0.0}, b: {reward: 1.0, seconds: 0.0}}"
    return load_config(
        None,
        [
            f"model.model={model_dir}",
            "model.dtype=float32",
            "model.lora=false",
            "task.name=timed_bandit",
            "task.options.process=false",
            f"task.options.arms={arms}",
            "task.options.fallback_arm=random",
            "task.options.eval_size=2",
            "rollout.group_size=2",
            "rollout.tasks_per_step=1",
            "sampling.max_new_tokens=4",
            "train.steps=2",
            "train.micro_batch_size=4",
            "train.checkpoint_every=1",
            "train.lr=1e-3",
            "eval.every=0",
            "algo.dynamic_sampling=false",
            "algo.mask_overlong=false",
            f"run.out_dir={out}",
            f"run.name={name}",
            *extra,
        ],
    )


def ask_engine_actor_at_close(monkeypatch) -> dict:
    """Before an engine actor goes, ask it (not the driver's record) for the version it holds;
    the returned dict gets `engine_version` and `engine_pid`."""
    import practicum.runtime.ray_engine as ray_engine

    seen = {}
    real_close = ray_engine.RayEngine.close

    def close(engine):
        _, seen["engine_version"] = ray.get(
            engine.handle.generate.remote([[1, 2]], SamplingParams(max_new_tokens=1), None, True)
        )
        seen["engine_pid"] = engine.pid
        real_close(engine)

    monkeypatch.setattr(ray_engine.RayEngine, "close", close)
    return seen


def wait_gone(pid: int) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"the killed actor (pid {pid}) still runs")


def test_a_run_with_engine_and_learner_in_actors_trains_like_one_in_the_driver(
    tiny_model_dir, tmp_path, monkeypatch, train_run, metric_rows
):
    """The same sync run twice: everything in this process (local backend), and environments,
    engine and learner in Ray actors (the whole state dict crosses from the learner actor to
    the engine actor each step). Every turn was sampled in the engine actor at the version the
    driver published, each episode is stored and trained once, both runs draw the same tokens
    and compute the same losses, and the learner actor wrote the checkpoints. Before the
    actors go: the learner actor reloads a checkpoint; then a call to it times out, the actor
    is killed and nothing retries it (it holds the only optimizer state): the run would stop
    with a TrainingError naming resume."""
    from safetensors.torch import load_file

    import practicum.runtime.ray_learner as ray_learner
    from practicum.errors import TrainingError

    seen = ask_engine_actor_at_close(monkeypatch)
    real_learner_close = ray_learner.RayLearner.close

    def learner_close(remote):
        first = seen["run_dir"] / "checkpoints" / "step_000001"
        seen["loaded_step"] = (remote.load(first), remote.step)[1]
        seen["reloaded"] = remote.export_weights(1).fetch().tensors
        seen["saved"] = load_file(first / "policy" / "model.safetensors")
        remote.timeout = 1e-4  # far below one round trip to the actor
        seen["learner_errors"] = []
        for call in (lambda: remote.export_weights(8), lambda: remote.train_step([])):
            try:
                call()
            except TrainingError as e:
                seen["learner_errors"].append(str(e))
        seen["learner_pid"] = remote.pid
        real_learner_close(remote)

    monkeypatch.setattr(ray_learner.RayLearner, "close", learner_close)
    runs = {}
    for name, where in (
        ("driver", []),
        ("actors", ["placement.kind=ray", "placement.engine.cpus=0", "placement.learner.cpus=0"]),
    ):
        cfg = bandit_run(tiny_model_dir, tmp_path, name, *where)
        seen["run_dir"] = cfg.run_dir
        summary = train_run(cfg)
        stored = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
        assert summary["steps"] == 2 and len({e.episode_id for e in stored}) == len(stored) == 4
        assert all(e.failure is None for e in stored)
        # batch b was sampled after b - 1 updates (the engine actor reports its version per call)
        assert [{t.policy_version for t in e.turns} for e in stored] == [{0}, {0}, {1}, {1}]
        assert [e.info["batch"] for e in stored] == [1, 1, 2, 2]
        rows = read_ledger(cfg.run_dir / "consumed.jsonl")
        assert sorted(p for r in rows for p, _ in r["trained"]) == [0, 1, 2, 3]
        assert summary["eval_after"]["policy_version"] == 2
        assert (cfg.run_dir / "checkpoints" / "latest").read_text() == "step_000002"
        runs[name] = (summary, stored, metric_rows(cfg.run_dir))

    summary, stored, metrics = runs["actors"]
    assert summary["ray_engine"]["version"] == 2 and seen["engine_version"] == 2
    assert summary["ray_engine"]["engine_restarts"] == 0
    assert [r["ray_engine_restarts"] for r in metrics] == [0.0, 0.0]
    assert len({os.getpid(), seen["engine_pid"], summary["ray_learner_pid"]}) == 3
    _, stored_d, metrics_d = runs["driver"]
    assert [[t.sampled_ids for t in e.turns] for e in stored] == [
        [t.sampled_ids for t in e.turns] for e in stored_d
    ]
    for r, rd in zip(metrics, metrics_d, strict=True):
        assert r["loss"] == pytest.approx(rd["loss"], abs=1e-5)
        assert r["grad_norm"] == pytest.approx(rd["grad_norm"], rel=1e-4)
        assert r["grad_norm"] > 0

    assert seen["loaded_step"] == 1
    assert set(seen["saved"]) <= set(seen["reloaded"])
    assert all(torch.equal(seen["saved"][k], seen["reloaded"][k]) for k in seen["saved"])
    pid = seen["learner_pid"]
    assert seen["learner_errors"] == [
        f"learner export timed out after 0.0001 s (pid {pid}); resume from the last checkpoint "
        "with run.resume=true",
        "the learner actor is gone (see the error before this one)",
    ]
    wait_gone(pid)


@pytest.mark.slow
def test_an_async_run_with_engine_and_learner_in_actors_stores_and_trains_each_episode_once(
    tiny_model_dir, tmp_path, monkeypatch, train_run, caplog
):
    """runtime.mode=async with the engine and the learner in Ray actors: two actor threads
    sample from the engine actor while the learner actor trains. Every episode is stored once
    and consumed at most once, only complete groups are trained, every turn's version is one
    the engine actor held (within the staleness bound), the engine actor ends holding the
    learner's last step, and the run shuts down without abandoning an actor thread."""
    seen = ask_engine_actor_at_close(monkeypatch)
    cfg = bandit_run(
        tiny_model_dir,
        tmp_path,
        "async",
        "train.steps=3",
        "runtime.mode=async",
        "runtime.num_actors=2",
        "runtime.max_staleness=1",
        "placement.kind=ray",
        "placement.engine.cpus=0",
        "placement.learner.cpus=0",
    )
    with caplog.at_level("WARNING", logger="practicum.runtime.actors"):
        summary = train_run(cfg)
    assert summary["steps"] == 3 and summary["mode"] == "async"
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
    stored = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    assert len({e.episode_id for e in stored}) == len(stored) >= 6
    assert len({(e.group_id, e.info["slot"]) for e in stored}) == len(stored)
    assert all(e.failure is None for e in stored)
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    consumed = [p for r in rows for k in ("trained", "filtered", "dropped") for p, _ in r[k]]
    assert len(consumed) == len(set(consumed)) and set(consumed) <= set(range(len(stored)))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # complete groups (those due at a version may join), at most 1 version old
        trained = [stored[p] for p, _ in r["trained"]]
        groups = [e.group_id for e in trained]
        assert trained and all(groups.count(g) == 2 for g in groups)
        assert all(0 <= r["step"] - 1 - t.policy_version <= 1 for e in trained for t in e.turns)
    assert summary["ray_engine"]["version"] == 3 and seen["engine_version"] == 3
    assert summary["ray_engine"]["engine_restarts"] == 0
    assert summary["eval_after"]["policy_version"] == 3
    assert len({os.getpid(), seen["engine_pid"], summary["ray_learner_pid"]}) == 3
    assert (cfg.run_dir / "checkpoints" / "latest").read_text() == "step_000003"


class Crash(BaseException):
    """Stands in for SIGKILL: nothing catches it, nothing after it runs."""


@pytest.mark.slow
def test_a_killed_run_with_the_learner_in_an_actor_resumes_exactly(
    tiny_model_dir, tmp_path, monkeypatch, train_run, metric_rows
):
    """LoRA with dropout, so training draws from the torch RNG of the process that trains (the
    learner actor): 4 steps uninterrupted with everything in this process, and 4 steps with
    the learner in an actor, killed right after step 3's ledger row (checkpoint at step 2) and
    resumed in a fresh actor, give the same episodes, losses and final weights. A resume that
    restored weights and optimizer but not the actor's RNG would draw other dropout masks for
    steps 3 and 4 (and other tokens from step 4 on)."""
    from safetensors.torch import load_file

    from practicum.store.ledger import ConsumptionLedger

    def config(name, *where):
        return bandit_run(
            tiny_model_dir,
            tmp_path,
            name,
            "train.steps=4",
            "train.checkpoint_every=2",
            "model.lora=true",
            "model.lora_dropout=0.5",
            "train.lr=3e-2",
            *where,
        )

    actor = ("placement.kind=ray", "placement.learner.cpus=0")

    def outcome(run_dir):
        policy = run_dir / "checkpoints" / "step_000004" / "policy"
        weights = {
            k: v for f in sorted(policy.glob("*.safetensors")) for k, v in load_file(f).items()
        }
        draws = [
            (e.group_id, e.info["slot"], [t.sampled_ids for t in e.turns])
            for e in EpisodeStore(run_dir / "episodes.jsonl")
        ]
        return weights, draws, [(r["step"], r["loss"]) for r in metric_rows(run_dir)]

    reference = config("reference")
    assert train_run(reference)["steps"] == 4
    cfg = config("killed", *actor)
    real, calls = ConsumptionLedger.record, [0]

    def record(ledger, *args, **kwargs):
        real(ledger, *args, **kwargs)
        calls[0] += 1
        if calls[0] == 3:
            raise Crash("after step 3's ledger row")

    with monkeypatch.context() as m:
        m.setattr(ConsumptionLedger, "record", record)
        with pytest.raises(Crash):
            train_run(cfg)
    assert (cfg.run_dir / "checkpoints" / "latest").read_text() == "step_000002"
    summary = train_run(config("killed", *actor))  # run.resume is on by default
    assert summary["steps"] == 4
    (wa, da, la), (wb, db, lb) = outcome(reference.run_dir), outcome(cfg.run_dir)
    assert db == da and [s for s, _ in lb] == [1, 2, 3, 4]
    assert lb == [(s, pytest.approx(x, abs=1e-6)) for s, x in la]
    assert wa.keys() == wb.keys() and any("lora_A" in k for k in wa)
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-6)


def test_a_streamed_formation_takes_backend_and_dtype_from_the_actors():
    """The engine actors say how they receive (on their own node and devices): the driver's
    own device plays no part, so a driver without a GPU forms an nccl group with GPU actors;
    actors that receive differently cannot share one group."""
    from types import SimpleNamespace

    from practicum.engine.weight_stream import StreamFormat
    from practicum.runtime.ray_engine import Streams

    cfg = SimpleNamespace(weight_bucket_mb=64.0, verify_weights=True)
    gpu = [
        SimpleNamespace(stream_format=StreamFormat(2, "nccl", "bfloat16"), started=1),
        SimpleNamespace(stream_format=StreamFormat(1, "nccl", "bfloat16"), started=1),
    ]
    streams = Streams()
    target = streams.target_for(gpu, cfg)
    assert (target.world, target.backend, target.dtype, target.verify) == (
        4,
        "nccl",
        "bfloat16",
        True,
    )
    assert streams.target_for(gpu, cfg) is target  # kept while the members stay
    gpu[1].started = 2  # a replaced actor: a new formation
    assert streams.target_for(gpu, cfg).prefix != target.prefix
    mixed = [gpu[0], SimpleNamespace(stream_format=StreamFormat(1, "gloo", "float32"), started=1)]
    with pytest.raises(ValueError, match="cannot share a weight group"):
        Streams().target_for(mixed, cfg)
