"""Helpers for tests of the sharded learner: real gloo process groups on the CPU.

`spawn(world, fn, *args)` runs `fn(rank, *args)` in `world` fresh processes joined into one
gloo group (as torchrun would), with a deadline so that a hung collective fails the test.
The functions it runs live here, importable by name in the child processes; under torchrun,
`python -m tests.ranks FUNCTION ARGS_FILE` runs one of them (its arguments saved with
`torch.save`) as this process's rank.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import torch

from practicum.config import Config, load_config
from practicum.episode import Episode, Turn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(world: int, fn, *args, timeout: float = 300.0, dies: tuple[int, ...] = ()) -> None:
    """Run fn(rank, *args) on `world` gloo ranks; raises if any rank fails or the deadline
    passes (the survivors are killed). `dies`: ranks that must end abnormally (killed), while
    the others run to their end."""
    import torch.multiprocessing as mp

    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        ctx = mp.start_processes(_enter, (fn, args), nprocs=world, join=False, start_method="spawn")
        import time

        deadline = time.monotonic() + timeout
        if dies:
            for p in ctx.processes:
                p.join(max(0.0, deadline - time.monotonic()))
            for p in ctx.processes:
                p.kill()
            codes = [p.exitcode for p in ctx.processes]
            for p in ctx.processes:
                p.join()
            if any((code != 0) != (rank in dies) for rank, code in enumerate(codes)):
                raise RuntimeError(f"exit codes {codes}; ranks {list(dies)} were to die")
            return
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                ctx.join()
                raise TimeoutError(f"ranks still running after {timeout:g} s")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _enter(rank: int, fn, args) -> None:
    import torch.distributed as dist

    os.environ["RANK"] = str(rank)
    torch.set_num_threads(1)
    try:
        fn(rank, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def rl_step(learner, episodes, baselines=None):
    """One RL step as the session runs it (`Session.train_step`): the rows built here
    (`rl_batch`), trained by `learner`; the learner's metrics plus the driver's, or None."""
    from practicum.algo.baselines import TaskBaselines
    from practicum.batch import rl_batch

    cfg = learner.cfg
    if baselines is None:
        baselines = TaskBaselines(cfg.algo.baseline_window)
    built = rl_batch(episodes, cfg, baselines)
    if built is None:
        return None
    out = learner.train_step(built[0])
    return None if out is None else {**out, **built[1]}


# -- a batch and a config for the tiny model -------------------------------------------------
def episodes(seed: int, even: bool = False) -> list[Episode]:
    """Two groups (5 and 4 episodes) sharing a 6-token prompt each, rewards 0 / 1, replies of
    3 to 9 tokens with off-policy behaviour log-probs; one episode has two segments: 10 rows,
    so 2 mini-batches of 5 split 3 / 2 over two ranks. even: 2 groups of 4 one-segment
    episodes, 8 rows: every micro-batch of 2 holds the same rows on 2 ranks as in one process.
    The prompts are shorter than `HFTrainable.min_shared_prefix`: one process then runs every
    row whole, as the sharded model always does, and both compute with the same operations."""
    rng = random.Random(seed)
    out = []
    for g, size in enumerate((4, 4) if even else (5, 4)):
        prompt = [rng.randrange(100, 5000) for _ in range(6)]
        for k in range(size):
            n = rng.randrange(3, 10)
            turns = [
                Turn(
                    [rng.randrange(100, 5000) for _ in range(n)],
                    [-rng.uniform(0.5, 6.0) for _ in range(n)],
                    0,
                )
            ]
            if k == 1 and not even:
                turns.append(
                    Turn(
                        [rng.randrange(100, 5000) for _ in range(4)],
                        [-rng.uniform(0.5, 6.0) for _ in range(4)],
                        0,
                        context_ids=[rng.randrange(100, 5000) for _ in range(5)],
                    )
                )
            out.append(Episode(f"t{g}", f"{seed}-{g}", prompt, turns, reward=float(k % 2)))
    return out


def sft_batch(seed: int):
    """The cross-entropy `TrainBatch` of `episodes(seed)`: every row's sampled tokens."""
    from practicum.finetune import sft_rows
    from practicum.learner.rows import TrainBatch

    return TrainBatch(sft_rows(episodes(seed)), "cross_entropy")


def poison_next_gradient(learner) -> None:
    """This process's next forward under grad returns NaN log-probs: its update's gradient is
    NaN on every rank once the ranks' gradients are reduced (a fault injected into one rank)."""
    real, fired = learner.model.token_logprobs, []

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        if not torch.is_grad_enabled() or fired:
            return out
        fired.append(True)
        nan = float("nan")
        return (out[0] * nan, out[1]) if isinstance(out, tuple) else out * nan

    learner.model.token_logprobs = poisoned


def optimizer_snapshot(learner) -> list[torch.Tensor]:
    """This process's optimizer state (its shards when sharded), step counts included."""
    out = []
    for state in learner.optimizer.state.values():
        for v in state.values():
            v = v.to_local() if hasattr(v, "to_local") else v
            out.append(v.detach().clone() if torch.is_tensor(v) else torch.tensor(v))
    return out


def config(model_dir: Path, lora: bool, *extra: str) -> Config:
    """Several PPO updates per batch (2 epochs x 2 mini-batches), micro-batches of 2 rows, KL
    on, the gradient norm clipped (the tiny model's is 0.003 to 0.02). AdamW moves every weight by
    about lr per update, however small its gradient, so float rounding in a near-zero gradient
    can move a weight by up to ~lr: a small lr keeps that below the tests' 1e-6."""
    return load_config(
        None,
        [
            f"model.model={model_dir}",
            "model.dtype=float32",
            "model.device=cpu",
            f"model.lora={str(lora).lower()}",
            "algo.kl_coef=0.1",
            "train.epochs=2",
            "train.mini_batches=2",
            "train.micro_batch_size=2",
            "train.lr=3e-5",
            "train.warmup_steps=0",
            "train.grad_clip=0.002",
            *extra,
        ],
    )


def trainable_weights(learner) -> dict[str, torch.Tensor]:
    """The trainable weights as exported to a sampler (gathered when sharded; rank 0)."""
    update = learner.export_weights(learner.step)
    return None if update is None else {k: v.detach().clone() for k, v in update.tensors.items()}


def one_process_learner(cfg: Config):
    """The unsharded learner (call it with one torch thread, as the ranks have, when comparing
    weights bit for bit)."""
    from practicum.engine.factory import load_trainable
    from practicum.learner import Learner
    from practicum.runtime.placement import policy_config

    return Learner(load_trainable(policy_config(cfg)), cfg)


def sharded(cfg: Config):
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    init_ranks("cpu", timeout_s=120)
    return sharded_learner(cfg, policy_config(cfg))


# -- what the ranks run --------------------------------------------------------------------
def train_and_report(
    rank: int, cfg: Config, seeds: list[int], out: Path, even: bool = False
) -> None:
    """Train one RL step per seed's batch, then one SFT step; rank 0 saves the weights and
    metrics to `out`."""
    learner = sharded(cfg)
    metrics = [rl_step(learner, episodes(s, even)) for s in seeds]
    metrics.append(learner.train_step(sft_batch(9)))  # then SFT, through the same step
    weights = trainable_weights(learner)
    if rank == 0:
        torch.save({"weights": weights, "metrics": metrics, "step": learner.step}, out)


def save_at_two_ranks(
    rank: int, lora: Config, full: Config, root: Path, resume: list[Path], out: Path
) -> None:
    """What 2 ranks do for the checkpoint tests (one spawn for all, to keep CI short):
    1. try to checkpoint into a folder of each rank's own (two nodes with local disks): refused;
    2. LoRA (uneven batches) and full fine-tuning (even ones): steps 1 and 2, checkpointing
       into root / "lora" and root / "full" after each;
    3. the LoRA learner resumes each checkpoint in `resume` and trains step 3.
    Rank 0 saves to `out`: the refusals' texts and, per resumed checkpoint, step 3's metrics
    and the weights after it."""
    from practicum.errors import PracticumError

    report = {"resumed": []}
    lora_learner = learner = sharded(lora)
    try:
        learner.save(root / f"node{rank}" / "checkpoints", {})
        refused = None
    except PracticumError as err:
        refused = str(err)
    report["refused"] = learner.ranks.gather(refused)
    for name, cfg in (("lora", lora), ("full", full)):
        if name == "full":
            learner = sharded(cfg)
        for s in (1, 2):
            rl_step(learner, episodes(s, even=name == "full"))
            learner.save(root / name, {"seed": s})
    for ckpt in resume:  # into the trained learner: loading replaces all of its state
        lora_learner.load(ckpt)
        metrics = rl_step(lora_learner, episodes(3))
        report["resumed"].append(
            {
                "metrics": metrics,
                "step": lora_learner.step,
                "weights": trainable_weights(lora_learner),
            }
        )
    if rank == 0:
        torch.save(report, out)


def resume_and_train(rank: int, cfg: Config, ckpt: Path, seed: int, out: Path) -> None:
    """Resume `ckpt`, train one step on `seed`'s batch; rank 0 saves its metrics, the weights
    after it and the step to `out`."""
    learner = sharded(cfg)
    learner.load(ckpt)
    metrics = rl_step(learner, episodes(seed))
    weights = trainable_weights(learner)
    if rank == 0:
        torch.save({"metrics": metrics, "weights": weights, "step": learner.step}, out)


def _rows(cfg: Config, seed: int):
    """`rl_step`'s batch of `episodes(seed)`."""
    from practicum.algo.baselines import TaskBaselines
    from practicum.batch import rl_batch

    return rl_batch(episodes(seed), cfg, TaskBaselines(cfg.algo.baseline_window))[0]


def _socket_addresses() -> dict[str, list[str]]:
    """The addresses this process listens on, and the local and remote ones of its
    connections."""
    import psutil

    conns = psutil.Process().net_connections("tcp")
    return {
        "listen": sorted({c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}),
        "local": sorted({c.laddr.ip for c in conns if c.raddr}),
        "remote": sorted({c.raddr.ip for c in conns if c.raddr}),
    }


def _stall_until(released: list[Path], seconds: float):
    """A forward pre-hook that stops this rank until every file in `released` exists (or
    `seconds` pass)."""
    import time

    def stall(module, args):
        end = time.monotonic() + seconds
        while not all(f.exists() for f in released) and time.monotonic() < end:
            time.sleep(0.2)

    return stall


def train_on_nodes(rank: int, cfgs: dict[str, Config], root: Path) -> None:
    """A rank of a multi-node torchrun launch (`placement.kind=torchrun`, each node's plan with
    its own network.address): the launch is checked against each plan, then for each plan in
    turn a `RankWorker` (the rank torchrun's `follow` serves) trains RL steps 1 and 2; the first
    plan's learner checkpoints into root / name, every learner exports. Then the last
    learner's rank 3 stalls in step 3 (forward, layer 1) until the 3 others have reported
    how step 3 failed for them. Each rank saves to root / rank<r>.pt: its node, its mesh
    coordinate and first local shard per plan, its sockets' addresses, step 3's outcome and how
    long it took; rank 0 the exported weights and metrics."""
    import time

    from practicum.errors import TrainingError
    from practicum.runtime.learner_group import RankWorker
    from practicum.runtime.placement import check_launch, policy_config

    report: dict = {"node": int(os.environ["GROUP_RANK"]), "plans": {}}
    worker = None
    for k, (name, cfg) in enumerate(cfgs.items()):
        check_launch(cfg)
        plan = cfg.placement
        if worker is not None:
            worker.board.close()  # the process group stays; the next learner has its own board
        worker = RankWorker(cfg, policy_config(cfg), plan.collective_timeout_s, plan.network)
        worker.join()
        model = worker.learner.model
        metrics = [worker.train_step(_rows(cfg, s))[0] for s in (1, 2)]
        if k == 0:
            worker.save_checkpoint(root / name, {"seed": 2}, 2)
        update = worker.export(2)[1]
        first = next(p for p in model.module.parameters())
        report["plans"][name] = {
            "coordinate": model.mesh.get_coordinate(),
            "shard": first.to_local().clone(),
            "metrics": metrics,
            "weights": None
            if update is None
            else {n: t.clone() for n, t in update.tensors.items()},
        }
    report["sockets"] = _socket_addresses()
    released = [root / f"released-by-{r}" for r in range(3)]
    if rank == 3:
        layer = worker.learner.model.inner.lm.model.layers[1]
        layer.register_forward_pre_hook(_stall_until(released, 120))
    start = time.monotonic()
    try:
        worker.train_step(_rows(cfg, 3))
        report["step_3"] = "trained"
    except TrainingError as err:
        report["step_3"] = str(err)
    report["step_3_seconds"] = time.monotonic() - start
    torch.save(report, root / f"rank{rank}.pt")
    if rank != 3:
        released[rank].touch()
    worker.board.close()


def die_in_step_2(rank: int, cfg: Config, root: Path) -> None:
    """Two ranks train step 1 and checkpoint into root / ckpt; in step 2 rank 1 is killed
    (SIGKILL) as its backward of layer 0 starts. Rank 0 saves how step 2 failed for it and how
    long that took to root / rank0.pt."""
    import signal
    import time

    from practicum.errors import TrainingError
    from practicum.runtime.learner_group import RankWorker
    from practicum.runtime.placement import policy_config

    worker = RankWorker(cfg, policy_config(cfg), 60.0)
    worker.join()
    worker.train_step(_rows(cfg, 1))
    worker.save_checkpoint(root / "ckpt", {"seed": 1}, 2)
    if rank == 1:
        out = worker.learner.model.inner.lm.model.layers[0]

        def kill(module, args, output):
            if output.requires_grad:  # not in the passes without gradients
                output.register_hook(lambda grad: os.kill(os.getpid(), signal.SIGKILL))

        out.register_forward_hook(kill)
    start = time.monotonic()
    try:
        worker.train_step(_rows(cfg, 2))
        outcome = "trained"
    except TrainingError as err:
        outcome = str(err)
    torch.save({"step_2": outcome, "seconds": time.monotonic() - start}, root / f"rank{rank}.pt")
    worker.board.close()


# -- checkpoints as an earlier practicum wrote them -------------------------------------------
def save_format_1(learner, ckpt_root: Path, extra: dict) -> Path:
    """A one-process checkpoint in format 1 (before sharded checkpoints): the policy folder, and
    trainer.pt holding the whole optimizer state in one process's layout."""
    from practicum.learner.checkpoint import rng_state

    ckpt = ckpt_root / f"step_{learner.step:06d}"
    learner.model.save(ckpt / "policy")
    torch.save(
        {
            "step": learner.step,
            "optimizer": learner.optimizer.state_dict(),
            "scheduler": learner.scheduler.state_dict(),
            "baselines": {"window": 32, "history": {}},
            "extra": extra,
            "rng": rng_state(),
        },
        ckpt / "trainer.pt",
    )
    (ckpt_root / "latest").write_text(ckpt.name)
    return ckpt


def skip_a_poisoned_step(rank: int, cfg: Config, ckpt_root: Path, out: Path) -> None:
    """Step 1 trains; in step 2 rank 1's gradient is NaN, so every rank skips the update;
    a checkpoint; step 3 trains. Each rank writes what it saw to out/rank<r>.pt."""
    learner = sharded(cfg)
    rl_step(learner, episodes(1))
    weights, moments = trainable_weights(learner), optimizer_snapshot(learner)
    if rank == 1:
        poison_next_gradient(learner)
    skipped = rl_step(learner, episodes(2))
    unchanged = all(torch.equal(a, b) for a, b in zip(moments, optimizer_snapshot(learner)))
    after_skip = trainable_weights(learner)
    learner.save(ckpt_root, {})
    trained = rl_step(learner, episodes(3))
    torch.save(
        {
            "weights": weights,
            "after_skip": after_skip,
            "final": trainable_weights(learner),
            "optimizer_unchanged": unchanged,
            "skipped": skipped,
            "trained": trained,
            "step": learner.step,
        },
        out / f"rank{rank}.pt",
    )


def load_on_ranks(rank: int, lora_cfg: Config, full_cfg: Config, out: Path) -> None:
    """Build a LoRA and a fully fine-tuned sharded model from saved policies (`model.init`;
    the full one with its KL reference), save them (the full one in files of at most 200 kB),
    export them, compute log-probs of the policy and of its frozen base, and try to load a
    folder of the wrong kind, one lacking weights and one without weight files. Each rank records
    the safetensors files it opened (Python's audit hook sees every `open`) and the errors it
    got."""
    import json
    import sys

    opened: list[str] = []

    def audit(event: str, args: tuple) -> None:
        if event == "open" and str(args[0]).endswith(".safetensors"):
            opened.append(str(args[0]))

    sys.addaudithook(audit)
    import torch.distributed as dist

    from practicum.errors import PracticumError
    from practicum.learner.sharded import init_ranks, sharded_trainable
    from practicum.runtime.placement import policy_config

    init_ranks("cpu", timeout_s=120)
    ids = torch.randint(100, 5000, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    report: dict = {}
    for kind, cfg in (("lora", lora_cfg), ("full", full_cfg)):
        model = sharded_trainable(policy_config(cfg), kl_reference=True)
        model.save(out / kind, max_file_bytes=200_000)
        update = model.export_weights(7)
        with torch.no_grad():
            logp = model.token_logprobs(ids, mask)
            with model.frozen_base():
                base = model.token_logprobs(ids, mask)
        report[kind] = {
            "tensors": None if update is None else update.tensors,
            "kind": None if update is None else update.kind,
            "logp": logp,
            "base": base,
        }
    errors = []
    for folder in (out / "lora", out.parent / "lacking", out.parent / "no-weights"):
        try:
            model.load_weights(folder)
        except PracticumError as err:
            errors.append(str(err))
    dist.barrier()
    (out / f"opened-{rank}.json").write_text(json.dumps(opened))
    (out / f"errors-{rank}.json").write_text(json.dumps(errors))
    if rank == 0:
        torch.save(report, out / "report.pt")


# -- the weight group (practicum.engine.weight_group) -----------------------------------------
def weight_tensors() -> dict[str, torch.Tensor]:
    """Tensors of three dtypes and odd shapes (a 0-dim one too), in an order that switches
    dtype, so a small bucket size gives buckets of one tensor, of several, and a dtype change."""
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(64, 48, generator=g),
        "a.bias": torch.randn(48, generator=g),
        "b.weight": torch.randn(300, 100, generator=g),
        "norm": torch.randn(7, generator=g).to(torch.bfloat16),
        "norm2": torch.randn(3, 5, generator=g).to(torch.bfloat16),
        "steps": torch.arange(11),
        "scale": torch.tensor(0.5),
    }


def receive_weights(rank: int, port: int, world: int, bucket_mb: float, out: Path) -> None:
    """A receiver (weight rank rank+1, as vLLM's tensor-parallel worker `rank`): save what
    arrives."""
    from practicum.engine.weight_group import WeightGroup, meta_of

    group = WeightGroup.join("127.0.0.1", port, rank + 1, world, "gloo", timeout_s=120)
    got = {k: v.clone() for k, v in group.receive(meta_of(weight_tensors()), bucket_mb=bucket_mb)}
    group.close()
    torch.save(got, out / f"received-{rank + 1}.pt")


def receive_streamed(target: dict, rank: int, out: Path, elsewhere: bool = False) -> None:
    """A receiver in a process of its own (weight rank `rank` of `target`): save what the
    stream brings and the fingerprints that followed it, or the error. `elsewhere`: it
    pretends to run on another machine (an ipc stream must refuse it)."""
    import practicum.engine.weight_ipc as weight_ipc
    from practicum.engine.weight_stream import Membership, WeightTarget

    if elsewhere:
        weight_ipc.machine_id = lambda: "another machine"
    member = Membership()
    try:
        group = member.of(WeightTarget(**target), rank)
        got = {k: v.clone() for k, v in group.receive_stream()}
        torch.save({"tensors": got, "sent": group.sent_fingerprints}, out / f"got-{rank}.pt")
    except Exception as err:  # noqa: BLE001 - the test reads it
        (out / f"error-{rank}.txt").write_text(str(err))
    finally:
        member.close()


def weights_beside_a_default_group(rank: int, out: Path) -> None:
    """Two processes in a default gloo group (as the sharded learner's ranks) form the weight
    group with the ranks reversed (default rank 1 sends); afterwards the default group still
    has its own ranks and works."""
    import torch.distributed as dist

    from practicum.engine.weight_group import WeightGroup, meta_of

    dist.init_process_group("gloo")
    tensors = weight_tensors()
    if rank == 1:
        pending = WeightGroup.open_server(2, "gloo", timeout_s=120)
        dist.broadcast_object_list([pending.port], src=1)
        group = pending.connect()
        group.send(list(tensors.values()), meta_of(tensors), bucket_mb=0.01)
    else:
        port = [None]
        dist.broadcast_object_list(port, src=1)
        group = WeightGroup.join("127.0.0.1", port[0], 1, 2, "gloo", timeout_s=120)
        got = {k: v.clone() for k, v in group.receive(meta_of(tensors), bucket_mb=0.01)}
        torch.save(got, out / "received.pt")
    group.close()
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    assert dist.get_rank() == rank and dist.get_world_size() == 2 and total.item() == 3.0


def worker_whose_reload_fails(rank: int, target: dict, out: Path) -> None:
    """vLLM's worker extension (`WeightsReloader`) as weight rank 1, its vLLM side reduced to a
    `reload_weights` that takes two tensors and then fails: the failure is raised, after every
    bucket was received (otherwise the sender would wait for them until its timeout)."""
    from practicum.engine.vllm_worker import WeightsReloader

    class Worker(WeightsReloader):
        rank, device = 0, torch.device("cpu")

        def reload_weights(self, weights_iterator):
            taken = [next(weights_iterator) for _ in range(2)]
            (out / "taken.txt").write_text(" ".join(name for name, _ in taken))
            raise ValueError("no such parameter")

    worker = Worker()
    try:
        worker.receive_stream(target, 1, None)
    except ValueError as err:
        (out / "error.txt").write_text(str(err))
    worker._weight_member.close()


def publish_to_vllm(rank: int, cfg: Config, out: Path) -> None:
    """Under torchrun with engine.kind=vllm and weight_sync=broadcast: rank 0 places the run
    (its learner rank and the vLLM engine it starts, version 0 streamed), takes a step and
    streams version 1, then loads the same version gathered through a file; what each version
    samples is saved. The other ranks serve the learner's calls."""
    from practicum.engine.base import SamplingParams
    from practicum.engine.weight_stream import StreamedUpdate
    from practicum.runtime.placement import place, serve_learner_rank

    if serve_learner_rank(cfg):
        return
    prompts = [[1, 504, 2341, 98, 12], [1, 77, 4012, 9], [1, 2222, 18, 3]]
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    sampled = SamplingParams(temperature=1.0, max_new_tokens=8)

    def draw(sampler):
        return [
            (s.token_ids, s.logprobs)
            for s in sampler.generate(prompts, greedy)
            + sampler.generate(prompts, sampled, [5, 6, 7])
        ]

    placement = place(cfg)
    try:
        sampler, learner = placement.sampler, placement.learner
        draws = {"v0": draw(sampler)}
        learner.train_step(_rows(cfg, 1))
        update = learner.export_weights(1)
        assert isinstance(update, StreamedUpdate)
        sampler.load_weights(update)
        draws["streamed"] = draw(sampler)
        sampler.options.weight_sync = "file"
        sampler.load_weights(learner.call("export", 1)[1])  # gathered on rank 0, as before
        draws["file"] = draw(sampler)
        draws["launcher_variables"] = [k for k in os.environ if k in ("RANK", "WORLD_SIZE")]
        torch.save(draws, out / "draws.pt")
    finally:
        placement.close()


def main(argv: list[str]) -> None:
    """`python -m tests.ranks FUNCTION ARGS_FILE` (under torchrun): FUNCTION(RANK, *args)."""
    import torch.distributed as dist

    fn, args = globals()[argv[0]], torch.load(argv[1], weights_only=False)
    torch.set_num_threads(1)
    try:
        fn(int(os.environ["RANK"]), *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
