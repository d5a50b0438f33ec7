"""The placement plan (config section `placement:`): where each part of a run runs.

A run has four parts: the learner (trainable weights, optimizer, the PPO step, checkpoint
writing), the sampler (the engine of `engine.kind`), the environments, and the loop that drives
them, which always runs in the process `practicum train` started (the driver). The plan is one
variant, picked by `kind`, each with only its own fields:

    local          every part in the driver; environments in its child processes
    ray            Ray actors for the parts it names (`envs`, `engine`, `learner`), the rest in
                   the driver; a local Ray or a cluster (`address`)
    learner_group  the learner sharded with FSDP2 over `ranks` Ray actors in one placement
                   group (one bundle per rank); environments and sampler as in `ray`
    torchrun       the learner sharded over the `ranks` processes of a torchrun launch (on
                   `nodes` machines); rank 0 is the driver and runs the sampler, the
                   environments and the loop

Where the environments run is part of the plan, not a separate backend switch: it is the same
decision as for the sampler and the learner (which process, which machine, which resources),
it needs the same Ray cluster, address and call timeout, and the checks that span parts (an
engine actor beside Ray env workers, a suite whose state would live in Ray workers) then have
one home. The sharded variants carry `ranks`, the device `mesh` over them (full or hybrid
sharding, and sequence-parallel groups), the `network` their collectives use and
`collective_timeout_s`; torchrun adds its `nodes` and the driver's `sampler_device`, a Ray group
its placement `strategy`.

Checked from the config alone when it is read (`check_plan`, called by `practicum.config`);
what only the launch can tell (torchrun's process count, installed packages, the Ray cluster's
GPUs) is checked by `practicum.runtime.placement` before it builds anything.

The flat keys this section replaced (`runtime.backend`, `runtime.ray_*`, `runtime.learner_*`,
`engine.replicas`) are refused in new input (`refuse_old_keys`); a run folder's stored
config.yaml is migrated when it is read (`migrate`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from practicum.errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ActorResources(_Section):
    """What Ray reserves for one actor."""

    cpus: float = Field(1.0, ge=0, description="CPUs Ray reserves for the actor.")
    gpus: float = Field(
        0.0,
        ge=0,
        description="GPUs Ray reserves for the actor (above 0 it "
        "runs on a GPU). 0 on a Ray cluster that has GPUs is refused unless "
        "model.device is cpu (the actor would quietly run on the CPU).",
    )


class EnvActors(_Section):
    cpus: float = Field(
        0.0,
        ge=0,
        description="CPUs Ray reserves for each environment actor "
        "(0 = schedule them anywhere; above 0, Ray must have that many CPUs per "
        "environment in flight).",
    )


class EngineActors(ActorResources):
    """The sampler in Ray engine actors with weights of their own (`practicum.runtime.ray_engine`),
    each loading every published version; engine.kind hf, or vllm where vllm is installed in
    this Python environment."""

    replicas: int = Field(
        1,
        ge=1,
        description="Engine actors behind one sampler, each with "
        "its own copy of the weights and these cpus / gpus: requests are "
        "spread across them, every replica holds the published version before "
        "sampling resumes, and a dead one is replaced "
        "(practicum.runtime.replicas).",
    )


class Mesh(_Section):
    """How the learner's ranks hold the model: FSDP2 over a device mesh
    (`practicum.learner.sharded`)."""

    replicate: int = Field(
        1,
        ge=1,
        description="Copies of the model (hybrid sharding, HSDP): the ranks form a "
        "replicate x shard mesh (ranks = replicate x shard, consecutive ranks in one copy), "
        "each copy sharded over its shard ranks, which gather weights among themselves only; "
        "the gradients are summed over every rank, so the update is still one process's. One "
        "copy per node (replicate = nodes) keeps the gathers inside a node and sends only the "
        "gradient reduction across. 1 = full sharding over every rank.",
    )
    sequence: int = Field(
        1,
        ge=1,
        description="Sequence parallelism (Ulysses, practicum.learner.sequence): "
        "groups of this many consecutive ranks train the same rows, each rank computing 1 / "
        "sequence of every row's positions and attention exchanging heads for positions; "
        "ranks / sequence groups share out the rows. It must divide the model's attention "
        "heads and each copy's ranks (ranks / replicate); the gradients still sum to one "
        "process's. 1 = off.",
    )


class Network(_Section):
    """The addresses the learner's ranks use between nodes."""

    address: str | None = Field(
        None,
        description="This node's address: its ranks bind their collectives (gloo) to "
        "it, and as rank 0's node it is the address the weight group is reached at. Each "
        "node has its own: give it on that node's command line (e.g. "
        "placement.network.address=10.0.0.2). null: the address the host name resolves to "
        "(torch's default). The rendezvous is torchrun's (--rdzv-endpoint or --master-addr). "
        "torchrun only: a Ray group's ranks bind to their Ray node's address (ray start "
        "--node-ip-address).",
    )
    interface: str | None = Field(
        None,
        description="The network interface the collectives use, e.g. eth0 or ib0 "
        "(GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME of every rank, unless already set); null: "
        "the libraries' choice.",
    )


class _Plan(_Section):
    """What every variant answers, whatever its fields."""

    @property
    def on_ray(self) -> bool:
        """Some part runs in a Ray actor (a Ray is started or joined)."""
        return False

    @property
    def env_actors(self) -> EnvActors | None:
        return None

    @property
    def engine_actors(self) -> EngineActors | None:
        return None

    @property
    def learner_in_ray(self) -> bool:
        return False

    @property
    def learner_mesh(self) -> Mesh:
        """The sharded learner's mesh (full sharding where the plan has no ranks)."""
        return Mesh()


class LocalPlacement(_Plan):
    kind: Literal["local"] = Field(
        "local",
        description="Every part in this process: the "
        "learner, the sampler (sharing the learner's weights where "
        "the engine can) and the environments (in child processes).",
    )


class _OnRay(_Plan):
    """What every Ray variant has: the cluster, the call timeout, environments and sampler."""

    address: str | None = Field(
        None,
        description="The Ray cluster to join (e.g. 'auto' or "
        "'ray://head:10001', practicum installed on every node); null = "
        "start a local Ray on this machine (stopped at the end).",
    )
    call_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="Seconds one call to an actor may take: an environment "
        "(reset, step, close), an engine (generate, load weights) or the learner (train step, "
        "checkpoint). A call that runs longer is treated like a dead actor: it is killed; an "
        "env or engine call's episodes end as logged failures and the actor is replaced; a "
        "learner call stops the run (run.resume=true continues it).",
    )
    envs: EnvActors | None = Field(
        default_factory=EnvActors,
        description="The environments: one Ray actor per "
        "environment in flight, each building its suite from task.name / task.options "
        "(practicum.runtime.ray_envs); null = in this process (its child processes), e.g. for "
        "an environment that keeps state across episodes.",
    )
    engine: EngineActors | None = Field(
        None,
        description="The sampler: null = in this process (sharing the learner's weights "
        "when the learner is here too); a section = Ray engine actors that load every published "
        "version, e.g. {gpus: 1, replicas: 4}.",
    )

    @property
    def on_ray(self) -> bool:
        return True

    @property
    def env_actors(self) -> EnvActors | None:
        return self.envs

    @property
    def engine_actors(self) -> EngineActors | None:
        return self.engine


class RayPlacement(_OnRay):
    kind: Literal["ray"] = Field(
        description="Ray actors for the parts named here (envs, "
        "engine, learner); the others stay in this process."
    )
    learner: ActorResources | None = Field(
        None,
        description="The learner: null = in this process; a section = one Ray actor "
        "holding the weights, optimizer and PPO step and writing the checkpoints into the run "
        "folder, which it must see (practicum.runtime.ray_learner); the sampler then loads every "
        "published version. Commands that reach into the model (`practicum rft`) need it here.",
    )

    @property
    def learner_in_ray(self) -> bool:
        return self.learner is not None


class LearnerGroupPlacement(_OnRay):
    kind: Literal["learner_group"] = Field(
        description="The learner sharded with FSDP2 over `ranks` Ray actors in one placement "
        "group (practicum.runtime.learner_group; N ranks train exactly as one process); "
        "environments and sampler as in kind ray."
    )
    ranks: int = Field(
        ge=2,
        description="Learner ranks: Ray actors, one placement-group bundle "
        "each (one GPU each on GPUs).",
    )
    rank: ActorResources = Field(
        default_factory=ActorResources, description="What each rank's bundle reserves."
    )
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK",
        description="How Ray spreads the ranks' bundles over nodes (its placement-group "
        "strategies): PACK = on as few nodes as fit, STRICT_SPREAD = each rank on a node of its "
        "own, ... The ranks are numbered node by node, so a mesh's copies (mesh.replicate = "
        "nodes) each sit on one node.",
    )
    mesh: Mesh = Field(
        default_factory=Mesh, description="Full sharding, or hybrid (replicate x shard)."
    )
    network: Network = Field(
        default_factory=Network,
        description="The network interface of the collectives (address: torchrun only).",
    )
    collective_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Seconds one collective of the ranks (a weight gather, a "
        "gradient reduction) waits for a slower rank; past it the step fails with an error "
        "naming the rank that stalled or died and what it was doing (run.resume=true "
        "continues the run).",
    )

    @property
    def learner_in_ray(self) -> bool:
        return True

    @property
    def learner_mesh(self) -> Mesh:
        return self.mesh


class TorchrunPlacement(_Plan):
    kind: Literal["torchrun"] = Field(
        description="The learner sharded with FSDP2 over the processes of `torchrun --nnodes M "
        "--nproc-per-node N -m practicum.cli train CONFIG` (ranks = M x N): rank 0 runs the "
        "sampler, the environments and the loop, the other ranks only the learner's calls "
        "(practicum.runtime.learner_group)."
    )
    ranks: int = Field(
        ge=2,
        description="Learner ranks: torchrun's processes over all nodes "
        "(--nnodes x --nproc-per-node); a launch with another count is refused.",
    )
    nodes: int = Field(
        1,
        ge=1,
        description="Machines of the launch (torchrun's --nnodes), "
        "each running ranks / nodes processes (--nproc-per-node).",
    )
    mesh: Mesh = Field(
        default_factory=Mesh, description="Full sharding, or hybrid (replicate x shard)."
    )
    network: Network = Field(
        default_factory=Network,
        description="The address and network interface of this node's collectives.",
    )
    sampler_device: str | None = Field(
        None,
        description="Where rank 0's sampler (engine.kind hf) runs. null: with a CUDA "
        "model.device the first GPU of rank 0's node that no learner rank takes "
        "(cuda:<ranks / nodes>), and a node without one is refused; else model.device. A GPU "
        "a learner rank uses (e.g. cuda:0) is shared knowingly. vLLM picks its GPUs itself "
        "(the node's first): under torchrun on GPUs it needs this set to cuda:0 to share "
        "them knowingly.",
    )
    collective_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Seconds one collective of the ranks waits for a slower rank; "
        "past it the step fails with an error naming the rank that stalled or died and what it "
        "was doing (torchrun ends the other ranks and its summary names a rank that died; "
        "run.resume=true continues the run).",
    )

    @property
    def learner_mesh(self) -> Mesh:
        return self.mesh


PlacementPlan = Annotated[
    Union[LocalPlacement, RayPlacement, LearnerGroupPlacement, TorchrunPlacement],
    Field(discriminator="kind"),
]
"""One variant per way of placing a run's parts (module doc)."""


def check_plan(plan: Any, engine: Any, device: str, stages: list) -> None:
    """The plan against the rest of the config (`engine`: its section, `device`: model.device,
    `stages`: the pipeline); raises ValueError naming the keys."""
    if isinstance(plan, RayPlacement) and not (plan.envs or plan.engine or plan.learner):
        raise ValueError(
            "placement.kind=ray with envs, engine and learner all null puts "
            "nothing in a Ray actor: use placement.kind=local"
        )
    if isinstance(plan, TorchrunPlacement) and stages:
        raise ValueError(
            "placement.kind=torchrun trains one run per launch: launch each "
            "stage's `practicum train` under torchrun instead of `stages:`"
        )
    if isinstance(plan, (LearnerGroupPlacement, TorchrunPlacement)):
        check_ranks(plan)
    if engine.kind != "vllm":
        return
    actors = plan.engine_actors
    if actors is not None and 0 < actors.gpus < engine.tensor_parallel_size:
        raise ValueError(
            f"placement.engine.gpus={actors.gpus:g}: "
            f"engine.tensor_parallel_size={engine.tensor_parallel_size} shards the "
            "model over that many GPUs, each engine actor needs as many"
        )
    # weight_sync=broadcast joins the learner's process and vLLM's workers in one NCCL group,
    # and NCCL cannot join two processes on one GPU: a learner here on a GPU that the engine
    # here takes (its first tensor_parallel_size GPUs) is refused; with device auto, at the
    # first publish
    if (
        engine.weight_sync == "broadcast"
        and isinstance(plan, TorchrunPlacement)
        and device.startswith("cuda")
    ):
        raise ValueError(
            "engine.weight_sync=broadcast under torchrun: vLLM in rank 0 starts on "
            "the node's first GPU, which learner rank 0 uses, and NCCL cannot join "
            "two processes on one GPU (no CUDA-IPC path yet): set "
            "engine.weight_sync=file or memory"
        )
    if (
        engine.weight_sync == "broadcast"
        and actors is None
        and device.startswith("cuda")
        and int(device.partition(":")[2] or 0) < engine.tensor_parallel_size
    ):
        raise ValueError(
            f"engine.weight_sync=broadcast: the learner's {device} is one of the "
            f"{engine.tensor_parallel_size} GPU(s) vLLM takes here, and NCCL "
            "cannot join two processes on one GPU: set model.device to a GPU "
            "beyond them, or weight_sync=memory"
        )


def check_ranks(plan: LearnerGroupPlacement | TorchrunPlacement) -> None:
    """A sharded plan's ranks against its mesh and nodes."""
    if plan.ranks % plan.mesh.replicate:
        raise ValueError(
            f"placement.mesh.replicate={plan.mesh.replicate}: ranks={plan.ranks} "
            "is not a multiple of it (ranks = replicate x shard)"
        )
    copy = plan.ranks // plan.mesh.replicate
    if copy % plan.mesh.sequence:
        raise ValueError(
            f"placement.mesh.sequence={plan.mesh.sequence}: each copy's "
            f"{copy} ranks (ranks / mesh.replicate) do not split into sequence "
            "groups of that many"
        )
    if isinstance(plan, TorchrunPlacement) and plan.ranks % plan.nodes:
        raise ValueError(
            f"placement.nodes={plan.nodes}: ranks={plan.ranks} is not a multiple "
            "of it (each node runs ranks / nodes processes)"
        )
    if isinstance(plan, LearnerGroupPlacement) and plan.network.address is not None:
        raise ValueError(
            "placement.network.address: a Ray group's ranks bind to their Ray "
            "node's address (ray start --node-ip-address); the setting is "
            "torchrun's"
        )


# -- the keys this section replaced ---------------------------------------------------------

OLD_KEYS = {
    "runtime.backend": "placement.kind",
    "runtime.ray_address": "placement.address",
    "runtime.ray_env_cpus": "placement.envs.cpus",
    "runtime.ray_engine": "placement.engine (a section: engine actors; null: here)",
    "runtime.ray_engine_cpus": "placement.engine.cpus",
    "runtime.ray_engine_gpus": "placement.engine.gpus",
    "runtime.ray_learner": "placement.learner (kind ray) or kind learner_group",
    "runtime.ray_learner_cpus": "placement.learner.cpus or placement.rank.cpus",
    "runtime.ray_learner_gpus": "placement.learner.gpus or placement.rank.gpus",
    "runtime.learner_ranks": "placement.ranks (kind learner_group or torchrun)",
    "runtime.learner_collective_timeout_s": "placement.collective_timeout_s",
    "runtime.ray_call_timeout_s": "placement.call_timeout_s",
    "engine.replicas": "placement.engine.replicas",
}
"""Each flat key the `placement:` section replaced -> where its setting lives now."""


def old_keys(tree: dict) -> list[str]:
    """The replaced keys set in a config tree, dotted, in OLD_KEYS order."""
    found = []
    for key in OLD_KEYS:
        section, name = key.split(".")
        node = tree.get(section)
        if isinstance(node, dict) and name in node:
            found.append(key)
    return found


def old_key_message(keys: list[str]) -> str:
    """One line naming where each of `keys` went."""
    moved = ", ".join(f"{k} -> {OLD_KEYS[k]}" for k in keys)
    return (
        "moved to the placement section (placement: {kind: local | ray | learner_group | "
        f'torchrun, ...}}; README "Placement"): {moved}'
    )


def refuse_old_keys(tree: dict) -> None:
    """Raise ConfigError at the first replaced key in a config tree or a stage's overrides."""
    found = old_keys(tree)
    if found:
        raise ConfigError(f"config error at {found[0]}: {old_key_message(found)}")
    for i, stage in enumerate(tree.get("stages") or []):
        overrides = stage.get("overrides") if isinstance(stage, dict) else None
        found = [k for k in OLD_KEYS if k in (overrides or {})]
        if found:
            raise ConfigError(
                f"config error at stages[{i}].overrides.{found[0]}: {old_key_message(found)}"
            )


def plan_from_old(old: dict[str, Any]) -> dict[str, Any]:
    """The `placement:` section equivalent to the replaced keys `old` ("runtime.backend": ...,
    a key left out has its old default). learner_ranks above 1 without a Ray learner was a
    torchrun launch (its environments run in rank 0, even where backend was ray)."""

    def get(key: str, default: Any) -> Any:
        return old.get(key, default)

    ranks = get("runtime.learner_ranks", 1)
    collective = (
        {"collective_timeout_s": old["runtime.learner_collective_timeout_s"]}
        if "runtime.learner_collective_timeout_s" in old
        else {}
    )
    on_ray = get("runtime.backend", "local") == "ray"
    learner_actor = on_ray and get("runtime.ray_learner", "driver") == "actor"
    if ranks > 1 and not learner_actor:
        return {"kind": "torchrun", "ranks": ranks, **collective}
    if not on_ray:
        return {"kind": "local"}
    plan: dict[str, Any] = {"address": get("runtime.ray_address", None)}
    if "runtime.ray_call_timeout_s" in old:
        plan["call_timeout_s"] = old["runtime.ray_call_timeout_s"]
    plan["envs"] = {"cpus": get("runtime.ray_env_cpus", 0.0)}
    plan["engine"] = None
    if get("runtime.ray_engine", "driver") == "actor":
        plan["engine"] = {
            "cpus": get("runtime.ray_engine_cpus", 1.0),
            "gpus": get("runtime.ray_engine_gpus", 0.0),
            "replicas": get("engine.replicas", 1),
        }
    actor = {
        "cpus": get("runtime.ray_learner_cpus", 1.0),
        "gpus": get("runtime.ray_learner_gpus", 0.0),
    }
    if ranks > 1:
        return {"kind": "learner_group", "ranks": ranks, "rank": actor, **collective, **plan}
    return {"kind": "ray", **plan, "learner": actor if learner_actor else None}


def migrate(tree: dict) -> tuple[dict, list[str]]:
    """A stored run config's tree with the replaced keys turned into its `placement:` section
    (a stage's overrides of them into a `placement` override), and the keys it moved; a tree
    without them comes back unchanged."""
    moved = old_keys(tree)
    tree = {k: (dict(v) if isinstance(v, dict) else v) for k, v in tree.items()}
    old = {key: tree[key.split(".")[0]].pop(key.split(".")[1]) for key in moved}
    if moved:
        tree["placement"] = plan_from_old(old)
    stages = []
    for stage in tree.get("stages") or []:
        overrides = (stage.get("overrides") or {}) if isinstance(stage, dict) else {}
        mine = {k: overrides[k] for k in OLD_KEYS if k in overrides}
        if mine:
            kept = {k: v for k, v in overrides.items() if k not in mine}
            stage = {**stage, "overrides": {**kept, "placement": plan_from_old({**old, **mine})}}
            moved += [f"stages.{k}" for k in mine]
        stages.append(stage)
    if stages:
        tree["stages"] = stages
    return tree, moved
