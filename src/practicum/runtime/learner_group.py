"""The sharded learner's ranks (`practicum.learner.sharded`) behind the runtime's `Learner`
protocol.

    RankWorker        one rank: joins the process group, holds its shard and its `Learner`;
                      each call (train_step, export, save, load) is a collective that every
                      rank makes, in the same order
    RayLearnerGroup   placement.kind=learner_group: N RankWorker actors in a placement group,
                      one bundle (placement.rank: cpus, gpus) per rank, spread over the Ray
                      cluster's nodes by `placement.strategy` and numbered node by node; the
                      group picks MASTER_ADDR / MASTER_PORT (rank 0's node, a free port) and
                      RANK / WORLD_SIZE; each rank binds its collectives to its node's Ray address
    TorchrunLearner   placement.kind=torchrun: rank 0 is the driver (sampler, environments, the
                      loop); it sends each call to ranks > 0, which run `follow` instead of a
                      session; on `placement.nodes` machines, each launching its own torchrun

Either way the driver holds one `Learner`; rank 0 returns the metrics and the gathered weights;
every rank writes its shards of a checkpoint (`practicum.learner.checkpoint`: the format one
process writes too), so the run folder must be on a filesystem every rank's node mounts.

A rank that dies or stalls stops the step on every rank, and the error names it and its phase
(`practicum.learner.phases`: each rank posts its phase and a heartbeat to the rendezvous
store): a collective that waits longer than `placement.collective_timeout_s`, or whose peer's
socket closes, makes the waiting rank read the board and raise `TrainingError` naming the rank
that stalled, failed or died and what it was doing. Under Ray the first failed rank ends the
call at once (the others are killed with it; a dead actor is named with its last posted
phase); under torchrun, torchrun's agent ends the other ranks when one dies, and its summary
names the rank. The driver sees `TrainingError`; the step was not taken, so the ledger has not
recorded its episodes as trained, and `run.resume=true` continues from the last checkpoint.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from practicum.engine.base import QuietPart, WeightUpdate
from practicum.engine.hf_model import PolicyConfig, pick_device
from practicum.engine.weight_stream import StreamedUpdate
from practicum.errors import TrainingError
from practicum.placement_plan import Network
from practicum.runtime.ray_learner import (
    LearnerWorker,
    RayLearner,
    RemoteLearner,
    TrainableInActor,
)


class RankWorker(LearnerWorker):
    """One rank of the sharded learner (a Ray actor, or a torchrun process). Each collective
    call is watched (`practicum.learner.phases`): its phases are posted, and a failure names
    the rank that caused it."""

    def __init__(
        self, cfg, policy: PolicyConfig, collective_timeout: float, network: Network | None = None
    ):
        self.cfg, self.policy, self.collective_timeout = cfg, policy, collective_timeout
        self.network = network or Network()
        self.learner = self.board = None
        self.members: dict[tuple[str, int], Any] = {}
        """Rank 0's place in each sampler's weight group (by its rendezvous)."""
        self.bind: str | None = None
        """The address this rank's sockets bind to (its node's, under Ray)."""

    def node(self) -> tuple[str, str]:
        """This rank's Ray node: its id and its address."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def address(self) -> tuple[str, int]:
        """This node's address and a free port, for rank 0 to listen on."""
        import socket

        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def join(self, env: dict[str, str] | None = None, bind: str | None = None) -> int:
        """Join the process group (`env`: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; else
        torchrun's), its collectives bound to `bind` (else placement.network.address), and load
        this rank's shard."""
        from practicum.learner.phases import PhaseBoard, watch_layers
        from practicum.learner.sharded import decoder_layers, init_ranks, sharded_learner

        os.environ.update(env or {})
        self.bind = bind or self.network.address
        init_ranks(
            pick_device(self.policy.device).type,
            self.collective_timeout,
            address=bind or self.network.address,
            interface=self.network.interface,
        )
        self.board = PhaseBoard.open(self.collective_timeout)
        with self.board.call("load"):
            self.learner = sharded_learner(self.cfg, self.policy)
        model = self.learner.model
        watch_layers(self.board, decoder_layers(model.inner.lm))
        if model.reference is not None:
            watch_layers(self.board, decoder_layers(model.reference.model), "reference ")
        return os.getpid()

    def train_step(self, batch) -> tuple[dict | None, int]:
        with self.board.call(f"train_step {self.learner.step + 1}"):
            return super().train_step(batch)

    def export(self, version: int) -> tuple[str | None, WeightUpdate | None]:
        with self.board.call(f"export {version}"):
            update = self.learner.export_weights(version)  # gathered: rank 0's, else None
        return (update.kind if update else None), update

    def send_weights(self, version: int, target) -> None:
        """Stream the weights to a sampler's weight group (`engine.weight_stream`): every rank
        gathers, rank 0 sends (a member of each sampler's group, joined once per target and
        bound to this rank's address)."""
        from practicum.engine.weight_stream import Membership

        member = self.members.setdefault((target.host, target.port), Membership(self.bind))
        with self.board.call(f"send_weights {version}"):
            self.learner.model.stream_weights(target, member)

    def save_checkpoint(self, ckpt_root: Path, extra: dict, keep: int) -> Path:
        with self.board.call(f"save_checkpoint at step {self.learner.step}"):
            return super().save_checkpoint(ckpt_root, extra, keep)

    def load_checkpoint(self, ckpt: Path) -> tuple[dict, int]:
        with self.board.call(f"load_checkpoint {Path(ckpt).name}"):
            return super().load_checkpoint(ckpt)

    def save_policy(self, path: Path) -> None:
        with self.board.call("save_policy"):
            super().save_policy(path)

    def leave(self) -> None:
        import torch.distributed as dist

        for member in self.members.values():
            member.close()
        if self.board is not None:
            self.board.close()
        if dist.is_initialized():
            dist.destroy_process_group()


class RayLearnerGroup(RayLearner):
    """The runtime's `Learner` on `ranks` RankWorker actors in one placement group (module doc).
    Starts a local Ray when none is running (and stops it in `close`)."""

    def __init__(
        self,
        cfg,
        policy: PolicyConfig,
        ranks: int,
        *,
        cpus: float,
        gpus: float,
        timeout: float,
        collective_timeout: float,
        address: str | None = None,
        export_refs: bool = True,
        strategy: str = "PACK",
        network: Network | None = None,
    ):
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from practicum.runtime.ray_cluster import START_SECONDS, start_ray

        self.cfg, self.timeout, self.export_refs = cfg, timeout, export_refs
        self.step, self.handles, self.pids, self.nodes, self.pg = 0, [], [], [], None
        self.store: tuple[str, int] | None = None
        self._own_ray = start_ray(address)
        self._lock = threading.Lock()
        try:
            bundle = {k: v for k, v in (("CPU", cpus), ("GPU", gpus)) if v} or {"CPU": 0.01}
            self.pg = placement_group([bundle] * ranks, strategy=strategy)
            ray.get(self.pg.ready(), timeout=START_SECONDS)
            worker = ray.remote(RankWorker)
            handles = [
                worker.options(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=gpus,
                    max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self.pg, placement_group_bundle_index=i
                    ),
                ).remote(cfg, policy, collective_timeout, network)
                for i in range(ranks)
            ]
            nodes = ray.get([h.node.remote() for h in handles], timeout=START_SECONDS)
            # ranks numbered node by node (the first bundle's node first): a mesh's copies of
            # consecutive ranks then each sit on one node
            first = {node: k for k, (node, _) in reversed(list(enumerate(nodes)))}
            order = sorted(range(ranks), key=lambda k: (first[nodes[k][0]], k))
            self.handles = [handles[k] for k in order]
            self.nodes = [nodes[k] for k in order]
            addr, port = ray.get(self.handles[0].address.remote(), timeout=START_SECONDS)
            self.store = (addr, port)
            self.pids = ray.get(
                [
                    h.join.remote(
                        {
                            "MASTER_ADDR": addr,
                            "MASTER_PORT": str(port),
                            "RANK": str(i),
                            "WORLD_SIZE": str(ranks),
                        },
                        self.nodes[i][1],
                    )
                    for i, h in enumerate(self.handles)
                ],
                timeout=max(timeout, START_SECONDS),
            )
        except (ray.exceptions.RayError, TimeoutError) as e:
            self.close()
            raise TrainingError(
                f"starting the {ranks} learner ranks failed: {type(e).__name__}: {_first_line(e)}"
            ) from None
        except BaseException:
            self.close()
            raise

    def summary(self) -> dict[str, Any]:
        return {
            "learner_rank_pids": self.pids,
            "learner_rank_nodes": [node for node, _ in self.nodes],
        }

    def export_weights(self, version: int):
        """engine.weight_sync=broadcast (full fine-tuning): a `StreamedUpdate` the sampler
        pulls through its weight group; else the gathered weights (`RayLearner`)."""
        if self.cfg.streams_weights:
            return StreamedUpdate(
                version, lambda target: self.call("send_weights", version, target)
            )
        return super().export_weights(version)

    def call(self, what: str, *args, num_returns: int = 1) -> Any:
        """Every rank's method `what`; rank 0's result (num_returns=2: its first value and an
        ObjectRef of its second). The first rank to fail or a timeout ends it at once and
        kills the group (`TrainingError`)."""
        import ray

        with self._lock:
            if not self.handles:
                raise TrainingError("the learner ranks are gone (see the error before this one)")
            if num_returns == 1:
                firsts = [getattr(h, what).remote(*args) for h in self.handles]
                rest = None
            else:
                pairs = [
                    getattr(h, what).options(num_returns=2).remote(*args) for h in self.handles
                ]
                firsts, rest = [p[0] for p in pairs], pairs[0][1]
            try:
                values = self._gather(firsts)
                return values[0] if rest is None else (values[0], rest)
            except TimeoutError:
                reason = f"learner {what} timed out after {self.timeout:g} s"
            except ray.exceptions.RayError as e:
                reason = self._failure(what, e)
            self._kill()
        raise TrainingError(
            f"{reason}; the step was not taken: resume from the last checkpoint "
            "with run.resume=true"
        )

    def _failure(self, what: str, e) -> str:
        """Why a call failed, from the first rank's error: its own diagnosis of a collective
        (naming the culprit), else the rank and, when its actor died, its last posted phase."""
        import ray

        cause = getattr(e, "cause", None)
        if isinstance(cause, TrainingError):
            return str(cause)
        rank = getattr(e, "rank", "?")
        reason = f"learner rank {rank} failed during {what} ({type(e).__name__}: {_first_line(e)})"
        if isinstance(e, ray.exceptions.RayActorError) and self.store is not None:
            from practicum.learner.phases import last_phases

            post = last_phases(*self.store, len(self.handles)).get(rank)
            if post is not None:
                reason += f"; its last phase: {post.phase} (pid {post.pid} on {post.host})"
        return reason

    def _gather(self, refs: list) -> list:
        """Each rank's value; the first failure is raised as it happens (tagged with `rank`)."""
        import ray

        index = {ref: i for i, ref in enumerate(refs)}
        pending, deadline = list(refs), time.monotonic() + self.timeout
        while pending:
            ready, pending = ray.wait(
                pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic())
            )
            if not ready:
                raise TimeoutError
            try:
                ray.get(ready[0])
            except ray.exceptions.RayError as e:
                e.rank = index[ready[0]]
                raise
        return ray.get(refs)

    def _kill(self) -> None:
        import ray

        handles, self.handles = self.handles, []
        for h in handles:
            ray.kill(h, no_restart=True)

    def close(self) -> None:
        """Kill the ranks, remove the placement group; stop Ray if this group started it."""
        import ray
        from ray.util.placement_group import remove_placement_group

        self._kill()
        pg, self.pg = self.pg, None
        if pg is not None:
            remove_placement_group(pg)
        if self._own_ray:
            self._own_ray = False
            ray.shutdown()


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class TorchrunLearner(QuietPart, RemoteLearner):
    """Rank 0 of a torchrun launch, in the driver: each call runs here and on ranks > 0
    (`follow`), which receive it over a control group (module doc)."""

    def __init__(
        self, cfg, policy: PolicyConfig, collective_timeout: float, network: Network | None = None
    ):
        self.cfg = cfg
        self.worker = RankWorker(cfg, policy, collective_timeout, network)
        self.worker.join()
        self.control = _control_group(self.worker.network)
        self.step = 0
        self._closed = False

    @property
    def trainable(self):
        raise TrainableInActor(
            "config error at placement.kind: the trainable is sharded over "
            "the learner's ranks, so this command (it reaches into the "
            "model) needs the learner in one process (placement.kind=local)"
        )

    def call(self, what: str, *args) -> Any:
        import torch.distributed as dist

        if self._closed:
            raise TrainingError("the learner ranks are gone (see the error before this one)")
        try:
            dist.broadcast_object_list([what, args], src=0, group=self.control)
            return getattr(self.worker, what)(*args)
        except TrainingError as e:  # the ranks' diagnosis: who stalled or died, doing what
            reason = str(e)
        except (RuntimeError, dist.DistError) as e:
            reason = f"learner {what} failed on the ranks ({type(e).__name__}: {_first_line(e)})"
        self._closed = True
        raise TrainingError(
            f"{reason}; the step was not taken: resume from the last checkpoint "
            "with run.resume=true"
        )

    def export_weights(self, version: int) -> WeightUpdate | StreamedUpdate:
        """The gathered weights on this process's CPU, or with engine.weight_sync=broadcast a
        `StreamedUpdate` the sampler pulls through its weight group."""
        if self.cfg.streams_weights:
            return StreamedUpdate(
                version, lambda target: self.call("send_weights", version, target)
            )
        return self.call("export", version)[1]

    def close(self) -> None:
        import torch.distributed as dist

        if self._closed:
            return
        self._closed = True
        dist.broadcast_object_list(["close", ()], src=0, group=self.control)
        self.worker.leave()


def follow(
    cfg, policy: PolicyConfig, collective_timeout: float, network: Network | None = None
) -> None:
    """A torchrun rank > 0: make each call rank 0 sends, until it closes the group."""
    import torch.distributed as dist

    worker = RankWorker(cfg, policy, collective_timeout, network)
    worker.join()
    control = _control_group(worker.network)
    try:
        while True:
            box: list = [None, None]
            dist.broadcast_object_list(box, src=0, group=control)
            what, args = box
            if what == "close":
                return
            getattr(worker, what)(*args)
    finally:
        worker.leave()


def _control_group(network: Network):
    """The group rank 0 sends its calls over: gloo (objects on the CPU, whatever the device),
    bound as the collectives are; waits between calls last as long as sampling does, so no
    timeout."""
    import torch.distributed as dist

    from practicum.learner.sharded import gloo_backend

    return dist.new_group(backend=gloo_backend(network.address), timeout=timedelta(days=365))
