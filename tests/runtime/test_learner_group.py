"""learner_group.py: the sharded learner's ranks as a Ray actor group and under torchrun, on
real gloo process groups; a rank that dies stops the step."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from practicum.errors import TrainingError
from practicum.runtime.placement import policy_config
from practicum.store import EpisodeStore
from tests.ranks import (
    config,
    episodes,
    free_port,
    one_process_learner,
    rl_step,
    sft_batch,
    trainable_weights,
)
from tests.runtime.test_ray_engine import bandit_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_here():
    """A local Ray whose workers run at normal priority (Ray's default niceness, 15, starves
    the ranks on a shared, busy CPU); the groups join it."""
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _system_config={"worker_niceness": 0},
    )
    yield
    ray.shutdown()


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
def test_a_ray_group_trains_rl_and_sft_as_one_process_and_a_dead_rank_stops(
    tiny_model_dir, ray_here
):
    from practicum.runtime.learner_group import RayLearnerGroup

    cfg = config(tiny_model_dir, True)
    group = RayLearnerGroup(
        cfg,
        policy_config(cfg),
        2,
        cpus=0,
        gpus=0,
        timeout=300,
        collective_timeout=60,
        export_refs=False,
    )
    try:
        assert len(set(group.pids) | {os.getpid()}) == 3
        metrics = rl_step(group, episodes(1))
        assert group.step == 1 and metrics["updates"] == 4
        assert group.train_step(sft_batch(9))["updates"] == 1  # SFT through the same step
        got = {k: v.clone() for k, v in group.export_weights(2).tensors.items()}
        learner = one_process_learner(cfg)
        rl_step(learner, episodes(1))
        learner.train_step(sft_batch(9))
        assert max_diff(got, trainable_weights(learner)) < 1e-6

        import ray

        ray.kill(group.handles[1], no_restart=True)
        start = time.monotonic()
        with pytest.raises(  # ray.kill is asynchronous: the rank may take the call first
            TrainingError,
            match=r"learner rank 1 failed during train_step .*; "
            r"its last phase: (idle after export 2|train_step 3) .*"
            r"the step was not taken",
        ):
            rl_step(group, episodes(2))
        assert time.monotonic() - start < 30  # not the 60 s collective timeout
        assert group.step == 2 and group.handles == []
        with pytest.raises(TrainingError, match="the learner ranks are gone"):
            rl_step(group, episodes(2))
    finally:
        group.close()


@pytest.mark.slow
def test_a_run_trains_with_two_learner_ranks_in_a_ray_group(
    tiny_model_dir, tmp_path, train_run, ray_here
):
    cfg = bandit_run(
        tiny_model_dir,
        tmp_path,
        "group",
        "placement.kind=learner_group",
        "placement.ranks=2",
        "placement.rank.cpus=0",
    )
    summary = train_run(cfg)
    assert summary["steps"] == 2 and len(set(summary["learner_rank_pids"])) == 2
    stored = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    assert [{t.policy_version for t in e.turns} for e in stored] == [{0}, {0}, {1}, {1}]
    assert (cfg.run_dir / "checkpoints" / "latest").read_text() == "step_000002"


@pytest.mark.slow
def test_a_run_trains_with_two_learner_ranks_under_torchrun(tiny_model_dir, tmp_path):
    """The documented launch: `torchrun --nproc-per-node 2 -m practicum.cli train ...`; rank 0
    runs the session, rank 1 only the learner's calls."""
    cfg = bandit_run(tiny_model_dir, tmp_path, "torchrun")
    args = [
        *_bandit_args(),
        f"model.model={tiny_model_dir}",
        "model.dtype=float32",
        "model.lora=false",
        f"run.out_dir={tmp_path}",
        "run.name=torchrun",
        "placement={kind: torchrun, ranks: 2}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "practicum.cli",
            "train",
            "--quiet",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stored = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    assert len(stored) == 4
    assert (cfg.run_dir / "checkpoints" / "latest").read_text() == "step_000002"
    assert (
        torch.load(cfg.run_dir / "checkpoints" / "step_000002" / "trainer.pt", weights_only=False)[
            "step"
        ]
        == 2
    )


def _bandit_args() -> list[str]:
    """bandit_run's settings as command-line overrides."""
    arms = "{a: {reward: 0.0, seconds: 0.0}, b: {reward: 1.0, seconds: 0.0}}"
    return [
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
    ]


@pytest.mark.slow
def test_rft_trains_through_two_torchrun_ranks(tiny_model_dir, tmp_path):
    """`torchrun --nproc-per-node 2 -m practicum.cli rft ...`: rank 0 samples and keeps the
    solved episodes, both ranks train the SFT updates (one cross-entropy `train_step` each);
    the saved adapter equals one process fine-tuning on the same kept episodes."""
    from peft import load_peft_weights

    from practicum.algo.rft import rft_keep
    from practicum.finetune import finetune
    from practicum.runtime.rft import rft_config

    args = [
        f"model.model={tiny_model_dir}",
        "model.dtype=float32",
        "task.name=toy",
        "task.options.train_size=2",
        "task.options.eval_size=2",
        "sampling.max_new_tokens=6",
        "rollout.max_turns=1",
        "rollout.group_size=4",
        "rollout.tasks_per_step=2",
        "rft.samples_per_task=4",
        "rft.min_reward=0.6",
        "rft.epochs=2",
        "rft.lr=1e-4",
        "rft.batch_size=2",
        "algo.mask_overlong=false",
        f"run.out_dir={tmp_path}",
        "run.name=rft",
        "placement={kind: torchrun, ranks: 2}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "practicum.cli",
            "rft",
            "--quiet",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "rft" / "rft"
    stored = list(EpisodeStore(out / "episodes.jsonl"))
    kept = [e for e in stored if rft_keep(e.reward >= 0.6, e.failure is not None, False)]
    assert len(stored) == 8 and 0 < len(kept) < 8
    got = load_peft_weights(str(out / "policy"))

    from practicum.config import load_config

    cfg = rft_config(load_config(None, [a for a in args if not a.startswith("placement")]))
    learner = one_process_learner(cfg)
    torch.set_num_threads(1)  # as each rank
    finetune(learner, kept, cfg.rft, cfg.run.seed)
    want = trainable_weights(learner)
    assert max_diff(got, want) < 1e-6
    start = trainable_weights(one_process_learner(cfg))
    assert max_diff(want, start) > 1e-5  # a small lr: AdamW scales rounding up to ~lr


# -- more than one node ------------------------------------------------------------------------
STALL_TIMEOUT_S = 20
"""The launch's collective timeout: long enough for the 4 ranks to start together on a busy
machine, short enough to wait for in the stall test."""


def _node_plan(mesh: str, address: str, timeout: float = STALL_TIMEOUT_S) -> str:
    return (
        f"placement={{kind: torchrun, ranks: 4, nodes: 2, mesh: {mesh}, "
        f"network: {{address: {address}}}, collective_timeout_s: {timeout}}}"
    )


@pytest.fixture(scope="module")
def two_nodes(tiny_model_dir, tmp_path_factory):
    """Two torchrun "nodes" on this machine (`torchrun --nnodes 2 --node-rank i
    --nproc-per-node 2`, rendezvous on 127.0.0.1, node 1's ranks bound to 127.0.0.2), running
    `tests.ranks.train_on_nodes` with two plans: HSDP 2 x 2 with full fine-tuning, then full
    sharding over the 4 ranks with LoRA, then a rank that stalls. Returns the folder and each
    rank's report."""
    root = tmp_path_factory.mktemp("nodes")
    port = free_port()
    procs, logs = [], []
    for node, address in enumerate(("127.0.0.1", "127.0.0.2")):
        cfgs = {
            "hsdp": config(tiny_model_dir, False, _node_plan("{replicate: 2}", address)),
            "full": config(tiny_model_dir, True, _node_plan("{replicate: 1}", address)),
        }
        torch.save([cfgs, root], root / f"node{node}.pt")
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        }
        logs.append((root / f"node{node}.log").open("w"))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nnodes",
                    "2",
                    "--node-rank",
                    str(node),
                    "--nproc-per-node",
                    "2",
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                    "--local-addr",
                    address,
                    "-m",
                    "tests.ranks",
                    "train_on_nodes",
                    str(root / f"node{node}.pt"),
                ],
                env=env,
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
            )
        )
    try:  # a node that fails ends the other (whose agent would wait 300 s at its exit)
        deadline = time.monotonic() + 600
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() for p in procs):
                break
            time.sleep(1)
    finally:
        for p, log in zip(procs, logs):
            p.terminate()  # torchrun's agent ends its workers on SIGTERM
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
    outs = [(root / f"node{node}.log").read_text() for node in (0, 1)]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    return root, [torch.load(root / f"rank{r}.pt", weights_only=False) for r in range(4)]


def _one_process(cfg, steps: tuple[int, ...]):
    """One process's metrics and weights after RL steps on `episodes(s)`, and the learner."""
    torch.set_num_threads(1)  # as each rank
    learner = one_process_learner(cfg)
    metrics = [rl_step(learner, episodes(s)) for s in steps]
    return metrics, trainable_weights(learner), learner


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hsdp", "full"])
def test_two_torchrun_nodes_train_as_one_process(two_nodes, tiny_model_dir, name):
    """HSDP 2 x 2 (a copy of the model per node) and full sharding over 4 ranks on 2 nodes:
    2 RL steps, the weights within 1e-5 of one process's and the same losses. (Ranks take
    shares of equal tokens, so each sums its gradients in another order than one process;
    AdamW's first steps move a weight whose gradient is near zero by up to lr whatever its
    sign, which lifts that fp32 rounding to a few 1e-6 in full fine-tuning.)"""
    _, reports = two_nodes
    got = reports[0]["plans"][name]
    metrics, weights, _ = _one_process(config(tiny_model_dir, name == "full"), (1, 2))
    assert max_diff(got["weights"], weights) < 1e-5
    for m, want in zip(got["metrics"], metrics):
        assert m["loss"] == pytest.approx(want["loss"], rel=1e-6, abs=1e-9)


@pytest.mark.slow
def test_hsdp_puts_a_copy_on_each_node_and_node_1_binds_its_address(two_nodes):
    """Ranks 0, 1 on node 0 hold copy 0, ranks 2, 3 on node 1 copy 1: the same pieces (equal
    shards of the embedding) in each copy. Node 1's ranks listen for their collectives on
    127.0.0.2 only, and are reached there; node 0's ranks on 127.0.0.1 (their address) and
    never bind 127.0.0.2."""
    _, reports = two_nodes
    assert [r["node"] for r in reports] == [0, 0, 1, 1]
    hsdp = [r["plans"]["hsdp"] for r in reports]
    assert [tuple(h["coordinate"]) for h in hsdp] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert torch.equal(hsdp[0]["shard"], hsdp[2]["shard"])
    assert torch.equal(hsdp[1]["shard"], hsdp[3]["shard"])
    assert hsdp[0]["shard"].shape[0] + hsdp[1]["shard"].shape[0] == 49152  # the vocabulary
    full = [r["plans"]["full"] for r in reports]
    assert [tuple(f["coordinate"]) for f in full] == [(0,), (1,), (2,), (3,)]
    for r in (2, 3):
        assert reports[r]["sockets"]["listen"] == ["127.0.0.2"]
    for r in (0, 1):
        assert reports[r]["sockets"]["listen"] == ["127.0.0.1"]
        assert "127.0.0.2" not in reports[r]["sockets"]["local"]
    assert any("127.0.0.2" in r["sockets"]["remote"] for r in reports)  # dialled there


@pytest.mark.slow
def test_a_checkpoint_of_hsdp_ranks_resumes_in_one_process(two_nodes, tiny_model_dir):
    """Step 3 from the HSDP ranks' checkpoint of step 2, in one process, as an uninterrupted
    one-process run takes it: the same loss, weights within float rounding (full fine-tuning
    on uneven splits of 4 ranks, three AdamW updates: under 5e-6, a tenth of what one update
    moves a weight)."""
    root, _ = two_nodes
    cfg = config(tiny_model_dir, False)
    _, before, straight = _one_process(cfg, (1, 2))
    want = rl_step(straight, episodes(3))
    resumed = one_process_learner(cfg)
    resumed.load(root / "hsdp" / "step_000002")
    got = rl_step(resumed, episodes(3))
    assert resumed.step == 3 and got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    after = trainable_weights(straight)
    assert max_diff(trainable_weights(resumed), after) < 5e-6 < max_diff(after, before) / 10


@pytest.mark.slow
def test_a_stalled_rank_is_named_with_its_phase_within_the_timeout(two_nodes):
    """Rank 3 (node 1) stops in step 3's forward of layer 1: the other ranks' collectives time
    out after the configured timeout and each raises TrainingError naming rank 3, alive, and
    its phase."""
    _, reports = two_nodes
    for rank in (0, 1, 2):
        text, seconds = reports[rank]["step_3"], reports[rank]["step_3_seconds"]
        assert text.startswith("learner rank 3 stalled in train_step 3: forward, layer 1 "), text
        assert "alive" in text and f"rank {rank} waited in train_step 3" in text
        assert STALL_TIMEOUT_S <= seconds < STALL_TIMEOUT_S + 10


@pytest.mark.slow
def test_a_killed_rank_is_named_with_its_phase_and_the_run_resumes_exactly(
    tiny_model_dir, tmp_path
):
    """Rank 1 of 2 is killed (SIGKILL) as its backward of layer 0 starts in step 2: rank 0's
    collective fails at once, and its TrainingError names rank 1, dead, in step 2 (its phase
    as of its last heartbeat, up to a heartbeat before it died). The checkpoint of step 1 then
    resumes step 2 exactly as one process takes it."""
    from tests.ranks import die_in_step_2, spawn

    cfg = config(tiny_model_dir, True, "train.epochs=1", "train.mini_batches=1")
    spawn(2, die_in_step_2, cfg, tmp_path, dies=(1,))
    got = torch.load(tmp_path / "rank0.pt", weights_only=False)
    assert got["step_2"].startswith("learner rank 1 died in train_step 2"), got["step_2"]
    assert "no heartbeat" in got["step_2"] and got["seconds"] < 30  # not the 60 s timeout
    _, _, straight = _one_process(cfg, (1, 2))
    resumed = one_process_learner(cfg)
    resumed.load(tmp_path / "ckpt" / "step_000001")
    rl_step(resumed, episodes(2))
    assert resumed.step == 2
    assert max_diff(trainable_weights(resumed), trainable_weights(straight)) < 1e-6


@pytest.fixture
def two_raylets():
    """A Ray cluster of two nodes (two raylets, one CPU each) on this machine, joined."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "_system_config": {"worker_niceness": 0},
        },
    )
    try:
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_a_ray_group_spread_over_two_nodes_trains_as_one_process(tiny_model_dir, two_raylets):
    """placement.kind=learner_group with strategy STRICT_SPREAD and a copy of the model per
    node (mesh.replicate 2): the ranks run on the cluster's two nodes, and 2 RL steps give one
    process's weights."""
    from practicum.runtime.learner_group import RayLearnerGroup

    cfg = config(
        tiny_model_dir,
        True,
        "placement={kind: learner_group, ranks: 2, strategy: STRICT_SPREAD, mesh: {replicate: 2}}",
    )
    plan = cfg.placement
    group = RayLearnerGroup(
        cfg,
        policy_config(cfg),
        plan.ranks,
        cpus=1,
        gpus=0,
        timeout=300,
        collective_timeout=60,
        export_refs=False,
        strategy=plan.strategy,
        network=plan.network,
    )
    try:
        nodes = group.summary()["learner_rank_nodes"]
        cluster_nodes = {n.node_id for n in [two_raylets.head_node, *two_raylets.worker_nodes]}
        assert len(set(nodes)) == 2 and set(nodes) == cluster_nodes
        metrics = [rl_step(group, episodes(s)) for s in (1, 2)]
        got = {k: v.clone() for k, v in group.export_weights(2).tensors.items()}
    finally:
        group.close()
    want_metrics, want, _ = _one_process(config(tiny_model_dir, True), (1, 2))
    assert max_diff(got, want) < 1e-6
    for m, w in zip(metrics, want_metrics):
        assert m["loss"] == pytest.approx(w["loss"], rel=1e-6, abs=1e-9)


@pytest.mark.slow
def test_four_ranks_stream_full_weights_to_two_hf_replicas(tiny_model_dir, ray_here):
    """engine.weight_sync=broadcast: after a train step the four ranks stream the weights to
    two HF engine actors through one weight group (tiny buckets: many collectives); the
    replicas then sample exactly what a copy loaded with the gathered export samples, greedy
    tokens and seeded log-probs alike. The next version reuses the formed group."""
    from practicum.engine.base import SamplingParams
    from practicum.engine.hf import HFEngineCopy
    from practicum.engine.weight_stream import StreamedUpdate
    from practicum.runtime.learner_group import RayLearnerGroup
    from practicum.runtime.replicas import EngineReplicas

    cfg = config(
        tiny_model_dir,
        False,
        "engine.weight_sync=broadcast",
        "engine.weight_bucket_mb=0.05",
        "engine.verify_weights=true",
        "placement.kind=learner_group",
        "placement.ranks=4",
        "placement.rank.cpus=0",
    )
    policy = policy_config(cfg)
    group = RayLearnerGroup(
        cfg, policy, 4, cpus=0, gpus=0, timeout=300, collective_timeout=120, export_refs=False
    )
    replicas = EngineReplicas.start(cfg.engine, policy, n=2, cpus=0)
    try:
        rl_step(group, episodes(1))
        update = group.export_weights(1)
        assert isinstance(update, StreamedUpdate)
        replicas.load_weights(update)
        target = replicas._streams.target
        assert target.world == 3 and target.dtype == "float32" and target.verify
        gathered = HFEngineCopy(policy)
        gathered.load_weights(group.call("export", 1)[1])
        here = HFEngineCopy(policy)  # the driver's copy (as under torchrun) takes the stream too
        before = {k: v.clone() for k, v in here.holder.model.state_dict().items()}
        here.load_weights(group.export_weights(1))
        after, want_state = here.holder.model.state_dict(), gathered.holder.model.state_dict()
        assert all(torch.equal(after[k], want_state[k]) for k in want_state)  # bit for bit
        assert any(not torch.equal(after[k], before[k]) for k in before)  # trained weights
        prompts = [[1, 5, 9, 2], [3, 3, 7], [11, 4], [8, 2, 2, 6]]
        greedy = SamplingParams(temperature=0, max_new_tokens=6)
        sampled = SamplingParams(temperature=1.0, max_new_tokens=6)
        seeds = [1, 2, 3, 4]
        want = gathered.generate(prompts, greedy), gathered.generate(prompts, sampled, seeds)
        got = replicas.generate(prompts, greedy), replicas.generate(prompts, sampled, seeds)
        assert min(replicas.served) > 0  # both replicas sampled
        for w, g in zip(want, got):  # the same weights (other processes: float rounding)
            assert [s.token_ids for s in g] == [s.token_ids for s in w]
            assert (
                max(abs(a - b) for sg, sw in zip(g, w) for a, b in zip(sg.logprobs, sw.logprobs))
                < 1e-5
            )
        rl_step(group, episodes(2))
        replicas.load_weights(group.export_weights(2))
        assert replicas._streams.target is target and replicas.version == 2
    finally:
        replicas.close()
        group.close()
