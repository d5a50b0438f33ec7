"""Where each part of a run runs: the `placement:` plan (`practicum.placement_plan`), built.

    placement = place(cfg, suite)           # learner + sampler (+ tokenizer), weights at version 0
    place_envs(placement, cfg, suite, ctx)  # placement.envs: environments in Ray actors
    placement.metrics() / .summary() / .close()

This is the only module that reads the plan (`cfg.placement`) and the engine kind to decide
where a part goes; everything after it holds the `Learner` and `Part` protocols
(`practicum.runtime.parts`) and a `Sampler`:

    learner   in this process (`practicum.learner.Learner` over the factory's trainable),
              a Ray actor (kind ray, `placement.learner`: `RayLearner`), or sharded over ranks:
              a Ray actor group (kind learner_group: `RayLearnerGroup`) or, under torchrun,
              this process as rank 0 (kind torchrun: `TorchrunLearner`; the other ranks call
              `serve_learner_rank` instead)
    sampler   the engine kind's sampler (`practicum.engine.factory`): sharing the in-process
              trainable's weights, or with weights of its own in a Ray actor (`RayEngine`),
              in N of them (`placement.engine.replicas`, `EngineReplicas`) or here when the
              learner is elsewhere (under torchrun on a device no learner rank takes:
              `torchrun_sampler_device`)
    envs      in this process (and its children), or Ray actors (`placement.envs`: `RayEnvPool`)
    ray       the Ray the actors live on (`RayCluster`), closed after them

Checks come before building: the config's own ran when it was read (`check_plan`); what only
this launch can tell (`check_launch`: torchrun's process count, installed packages) and the Ray
cluster's GPUs (`RayCluster.join`) are checked here before any part starts; torchrun's nodes
and processes per node by every rank, rank 0's sampler device by rank 0.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from practicum.config import Config
from practicum.engine.base import Sampler
from practicum.engine.factory import build_sampler, load_trainable
from practicum.engine.hf_model import check_attn_implementation, load_tokenizer, pick_device
from practicum.engine.models import resolve_model
from practicum.engine.options import PolicyConfig, VLLMOptions
from practicum.engine.rope import check_context
from practicum.envs.registry import Suite, SuiteContext
from practicum.errors import ConfigError
from practicum.learner import Learner as LocalLearner
from practicum.placement_plan import LearnerGroupPlacement, RayPlacement, TorchrunPlacement
from practicum.runtime.parts import Learner, Part
from practicum.runtime.ray_cluster import RayCluster, require_ray

if TYPE_CHECKING:
    from practicum.engine.hf_trainable import HFTrainable

log = logging.getLogger(__name__)


@dataclass
class Placement:
    """The placed parts of a run (module doc)."""

    learner: Learner
    sampler: Sampler
    tokenizer: Any
    envs: Part | None = None
    """placement.envs: the Ray env workers behind `suite.make_env`."""
    ray: RayCluster | None = None
    """A Ray plan: the Ray its actors live on."""
    _closed: bool = field(default=False, repr=False)

    @property
    def parts(self) -> list[Part]:
        """Every part, in the order they are closed (the reverse of their start)."""
        return [p for p in (self.envs, self.sampler, self.learner, self.ray) if p is not None]

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for part in self.parts:
            out.update(part.metrics())
        return out

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part in self.parts:
            out.update(part.summary())
        return out

    def close(self) -> None:
        """Close every part, even when one fails (the first failure is raised afterwards)."""
        if self._closed:
            return
        self._closed = True
        error: BaseException | None = None
        for part in self.parts:
            try:
                part.close()
            except BaseException as e:  # noqa: BLE001 - close the rest, then report
                log.error("closing %s failed: %s", type(part).__name__, e)
                error = error or e
        if error is not None:
            raise error


def policy_config(cfg: Config) -> PolicyConfig:
    """The model section of a run config and the run's seed, as the engines and the trainable
    read them."""
    return PolicyConfig.model_validate({**dict(cfg.model), "seed": cfg.run.seed})


def place(cfg: Config, suite: Suite | None = None) -> Placement:
    """The learner and the sampler placed as the plan says, the sampler holding the learner's
    weights as version 0. A device this machine lacks, an attention kernel it cannot run, a
    launch that does not match the plan, a `suite` that cannot run in Ray actors or an actor
    refused a GPU it needs is refused before any part starts."""
    plan = cfg.placement
    policy = policy_config(cfg)
    check_attn_implementation(policy.attn_implementation, pick_device(policy.device))
    check_context_lengths(cfg, policy)
    check_launch(cfg, suite)
    # filled in start order (None until then); a part that fails to start closes those started
    # before it
    placed = Placement(
        cast(Learner, None),
        cast(Sampler, None),
        None,
        ray=RayCluster.join(plan, policy.device) if plan.on_ray else None,
    )
    try:
        placed.learner = learner = _place_learner(cfg, policy)
        in_process = isinstance(learner, LocalLearner)
        placed.sampler = _place_sampler(cfg, policy, learner, in_process)
        placed.tokenizer = (
            learner.trainable.tokenizer
            if in_process
            else load_tokenizer(resolve_model(policy.model))
        )
    except BaseException:
        placed.close()
        raise
    return placed


def check_context_lengths(cfg: Config, policy: PolicyConfig) -> None:
    """A row (rollout.max_seq_len) or a vLLM context (engine.max_model_len) longer than the
    positions the model covers, natively or under model.rope_scaling, is refused in one line
    before anything loads."""
    path = resolve_model(policy.model)
    check_context(path, policy.rope_scaling_dict, cfg.rollout.max_seq_len, "rollout.max_seq_len")
    if isinstance(cfg.engine, VLLMOptions):
        check_context(
            path, policy.rope_scaling_dict, cfg.engine.max_model_len, "engine.max_model_len"
        )


def check_launch(cfg: Config, suite: Suite | None = None) -> None:
    """What the config cannot say about this launch: torchrun started as many processes as
    the plan has ranks (or none), on as many nodes, the model's heads split over the mesh's
    sequence groups, what the plan's actors need is installed here, and the environments (`suite`,
    when given) can run in Ray actors if the plan puts them there."""
    from importlib.util import find_spec

    plan, world = cfg.placement, _torchrun_world()
    if world > 1 and not (isinstance(plan, TorchrunPlacement) and plan.ranks == world):
        raise ConfigError(
            f"config error at placement: torchrun started {world} processes, so "
            f"set placement: {{kind: torchrun, ranks: {world}}}"
        )
    if world == 1 and isinstance(plan, TorchrunPlacement):
        raise ConfigError(
            f"config error at placement.kind: torchrun ranks are the processes "
            f"of `torchrun --nnodes {plan.nodes} --nproc-per-node "
            f"{plan.ranks // plan.nodes} -m practicum.cli train ...`; this process "
            "was not started by torchrun"
        )
    if world > 1:
        nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
        here = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        if nodes != plan.nodes or here != plan.ranks // plan.nodes:
            raise ConfigError(
                f"config error at placement.nodes: torchrun started {nodes} "
                f"node(s) with {here} process(es) on this one, the plan has "
                f"{plan.nodes} node(s) of {plan.ranks // plan.nodes} (ranks="
                f"{plan.ranks}): launch `torchrun --nnodes {plan.nodes} "
                f"--nproc-per-node {plan.ranks // plan.nodes} ...` on each node"
            )
    if plan.learner_mesh.sequence > 1:
        from transformers import AutoConfig

        from practicum.learner.sequence import check_model

        check_model(
            AutoConfig.from_pretrained(resolve_model(cfg.model.model)),
            plan.learner_mesh.sequence,
            cfg.model.attn_implementation,
        )
    if plan.on_ray:
        require_ray("placement.kind")
    if cfg.engine.kind == "vllm" and plan.engine_actors is not None and find_spec("vllm") is None:
        raise ConfigError(
            "config error at placement.engine: engine.kind=vllm in an engine "
            "actor needs vllm installed in this Python environment "
            "(scripts/requirements-cuda.txt)"
        )
    if suite is not None and plan.env_actors is not None:
        from practicum.runtime.ray_envs import refuse_stateful

        refuse_stateful(suite, cfg.task.name)


def _torchrun_world() -> int:
    """The number of processes torchrun started (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1")) if "TORCHELASTIC_RUN_ID" in os.environ else 1


def serve_learner_rank(cfg: Config) -> bool:
    """Under torchrun, a rank above 0 serves the learner's calls here until rank 0 (the driver)
    closes the group; True when this process was such a rank (it has nothing else to do)."""
    if _torchrun_world() == 1 or int(os.environ.get("RANK", "0")) == 0:
        return False
    from practicum.runtime.learner_group import follow

    check_launch(cfg)
    plan = cfg.placement
    follow(cfg, policy_config(cfg), plan.collective_timeout_s, plan.network)
    return True


def torchrun_sampler_device(
    plan: TorchrunPlacement, engine_kind: str, device: str, local_ranks: int, gpus: int
) -> str:
    """Where rank 0's sampler runs under torchrun (`placement.sampler_device`), its node
    running `local_ranks` learner ranks on cuda:0..local_ranks-1 (LOCAL_RANK) and having
    `gpus` GPUs; `device`: model.device resolved. A CUDA run whose sampler would land on a
    learner rank's GPU without the plan saying so is refused, naming the GPUs."""
    if plan.sampler_device is not None:
        if engine_kind == "vllm" and device.startswith("cuda") and plan.sampler_device != "cuda:0":
            raise ConfigError(
                f"config error at placement.sampler_device: "
                f"{plan.sampler_device}, but vLLM in rank 0 starts on this "
                "node's first GPU(s) whatever it is told: set cuda:0 (shared "
                "with learner rank 0 knowingly)"
            )
        return plan.sampler_device
    if not device.startswith("cuda"):
        return device
    taken = f"cuda:0-{local_ranks - 1}" if local_ranks > 1 else "cuda:0"
    if engine_kind == "vllm":
        raise ConfigError(
            f"config error at placement.sampler_device: vLLM in rank 0 starts on "
            f"this node's first GPU(s), which learner ranks use ({taken}): set "
            "placement.sampler_device: cuda:0 to share them knowingly"
        )
    if gpus > local_ranks:
        return f"cuda:{local_ranks}"
    raise ConfigError(
        f"config error at placement.sampler_device: the {local_ranks} learner "
        f"ranks on rank 0's node take {taken}, all of its {gpus} GPU(s), leaving "
        "none for rank 0's sampler: launch one process fewer per node "
        f"(--nproc-per-node {local_ranks - 1} and placement.ranks to match), or "
        "set placement.sampler_device: cuda:0 (shared with learner rank 0) or "
        "cpu"
    )


def _place_learner(cfg: Config, policy) -> Learner:
    plan = cfg.placement
    if isinstance(plan, TorchrunPlacement):
        from practicum.runtime.learner_group import TorchrunLearner

        return TorchrunLearner(cfg, policy, plan.collective_timeout_s, plan.network)
    export_refs = plan.engine_actors is not None  # an engine actor takes them from the store
    if isinstance(plan, LearnerGroupPlacement):
        from practicum.runtime.learner_group import RayLearnerGroup

        return RayLearnerGroup(
            cfg,
            policy,
            plan.ranks,
            cpus=plan.rank.cpus,
            gpus=plan.rank.gpus,
            timeout=plan.call_timeout_s,
            collective_timeout=plan.collective_timeout_s,
            address=plan.address,
            export_refs=export_refs,
            strategy=plan.strategy,
            network=plan.network,
        )
    if isinstance(plan, RayPlacement) and plan.learner is not None:
        from practicum.runtime.ray_learner import RayLearner

        return RayLearner(
            cfg,
            policy,
            cpus=plan.learner.cpus,
            gpus=plan.learner.gpus,
            timeout=plan.call_timeout_s,
            address=plan.address,
            export_refs=export_refs,
        )
    return LocalLearner(load_trainable(policy), cfg)


def _place_sampler(cfg: Config, policy, learner: Learner, in_process: bool) -> Sampler:
    plan, actors = cfg.placement, cfg.placement.engine_actors
    if actors is not None and actors.replicas > 1:
        from practicum.runtime.replicas import EngineReplicas

        sampler: Any = EngineReplicas.start(
            cfg.engine,
            policy,
            n=actors.replicas,
            cpus=actors.cpus,
            gpus=actors.gpus,
            timeout=plan.call_timeout_s,
            address=plan.address,
        )
    elif actors is not None:
        from practicum.runtime.ray_engine import RayEngine

        sampler = RayEngine(
            cfg.engine,
            policy,
            cpus=actors.cpus,
            gpus=actors.gpus,
            timeout=plan.call_timeout_s,
            address=plan.address,
        )
    elif in_process:  # may share the trainable's weights: holds version 0
        # the in-process learner's trainable is the factory's HFTrainable
        return build_sampler(cfg.engine, policy, cast("HFTrainable", learner.trainable))
    elif isinstance(plan, TorchrunPlacement):  # rank 0: a device no learner rank takes
        import torch

        device = torchrun_sampler_device(
            plan,
            cfg.engine.kind,
            str(pick_device(policy.device)),
            int(os.environ.get("LOCAL_WORLD_SIZE", plan.ranks // plan.nodes)),
            torch.cuda.device_count(),
        )
        sampler = build_sampler(cfg.engine, policy.model_copy(update={"device": device}))
    else:
        sampler = build_sampler(cfg.engine, policy)
    try:
        sampler.load_weights(learner.export_weights(0))
    except BaseException:
        sampler.close()
        raise
    return sampler


def place_envs(placement: Placement, cfg: Config, suite: Suite, ctx: SuiteContext) -> None:
    """placement.envs: point `suite.make_env` at Ray env workers, warmed for the runtime's
    number of environments in flight; else nothing to do (environments run here)."""
    plan = cfg.placement
    if plan.env_actors is None:
        return
    from practicum.runtime.ray_envs import use_ray

    rt = cfg.runtime
    warm = (
        rt.num_actors if rt.mode == "async" else cfg.rollout.group_size * cfg.rollout.tasks_per_step
    )
    placement.envs = use_ray(
        suite,
        cfg.task.name,
        cfg.task.options,
        ctx,
        plan.address,
        plan.env_actors.cpus,
        warm=warm,
        call_timeout=plan.call_timeout_s,
    )
