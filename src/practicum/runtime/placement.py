"""Where each part of a run runs, decided once from the config.

    placement = place(cfg)                  # learner + sampler (+ tokenizer), weights at version 0
    place_envs(placement, cfg, suite, ctx)  # runtime.backend=ray: environments in Ray actors
    placement.metrics() / .summary() / .close()

This is the only module that reads the placement settings (`runtime.ray_learner`,
`runtime.ray_engine`, `runtime.backend`, `runtime.learner_ranks`) and the engine kind;
everything after it holds the `Learner` and `Part` protocols (`practicum.runtime.parts`) and a
`Sampler`:

    learner   in this process (`practicum.learner.Learner` over the factory's trainable),
              a Ray actor (`RayLearner`), or sharded over ranks (`runtime.learner_ranks`):
              a Ray actor group (`RayLearnerGroup`) or, under torchrun, this process as rank 0
              (`TorchrunLearner`; the other ranks call `serve_learner_rank` instead)
    sampler   the engine kind's sampler (`practicum.engine.factory`): sharing the in-process
              trainable's weights, or with weights of its own in a Ray actor (`RayEngine`),
              in N of them (`engine.replicas`, `EngineReplicas`) or here when the learner is
              an actor
    envs      in this process (and its children), or Ray actors (`RayEnvPool`)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from practicum.config import Config
from practicum.engine.base import Sampler
from practicum.engine.factory import build_sampler, load_trainable
from practicum.engine.hf_model import (
    PolicyConfig,
    check_attn_implementation,
    load_tokenizer,
    pick_device,
)
from practicum.engine.models import resolve_model
from practicum.envs.registry import Suite, SuiteContext
from practicum.errors import ConfigError
from practicum.runtime.parts import Learner, Part

log = logging.getLogger(__name__)


@dataclass
class Placement:
    """The placed parts of a run (module doc)."""

    learner: Learner
    sampler: Sampler
    tokenizer: Any
    envs: Part | None = None
    """runtime.backend=ray: the Ray env workers behind `suite.make_env`."""
    _closed: bool = field(default=False, repr=False)

    @property
    def parts(self) -> list[Part]:
        """Every part, in the order they are closed (the reverse of their start)."""
        return [p for p in (self.envs, self.sampler, self.learner) if p is not None]

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
    """The model section of a run config, as the engines and the trainable read it."""
    m = cfg.model
    return PolicyConfig(
        model=m.model, dtype=m.dtype, device=m.device, attn_implementation=m.attn_implementation,
        lora=m.lora, lora_r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
        lora_target_modules=list(m.lora_target_modules),
        gradient_checkpointing=m.gradient_checkpointing, merged_sampling=m.merged_sampling,
        init=m.init, seed=cfg.run.seed)


def place(cfg: Config) -> Placement:
    """The learner and the sampler placed as the config says, the sampler holding the learner's
    weights as version 0. A device this machine lacks, or an attention kernel it cannot run, is
    refused before anything loads."""
    policy = policy_config(cfg)
    check_attn_implementation(policy.attn_implementation, pick_device(policy.device))
    rt = cfg.runtime
    if cfg.engine.kind != "hf" and rt.ray_learner == "actor":
        raise ConfigError(f"config error at runtime.ray_engine: Ray actors run the hf engine "
                          f"only (engine.kind={cfg.engine.kind} needs its own Python "
                          "environment)")
    _check_vllm_actor(cfg)
    ranks = _learner_ranks(cfg)
    learner = _place_learner(cfg, policy, ranks)
    in_process = rt.ray_learner == "driver" and ranks == 1
    try:
        sampler = _place_sampler(cfg, policy, learner, in_process)
    except BaseException:
        learner.close()
        raise
    tokenizer = (learner.trainable.tokenizer if in_process
                 else load_tokenizer(resolve_model(policy.model)))
    return Placement(learner, sampler, tokenizer)


def _check_vllm_actor(cfg: Config) -> None:
    """vLLM on GPUs of its own runs in engine actors, which need vLLM in this Python
    environment (requirements-cuda.txt; the CPU build lives in a venv of its own) and at least
    one GPU per tensor-parallel shard."""
    from importlib.util import find_spec

    rt, engine = cfg.runtime, cfg.engine
    if engine.kind != "vllm" or rt.ray_engine != "actor":
        return
    if find_spec("vllm") is None:
        raise ConfigError("config error at runtime.ray_engine: engine.kind=vllm in an engine "
                          "actor needs vllm installed in this Python environment "
                          "(scripts/requirements-cuda.txt)")
    if 0 < rt.ray_engine_gpus < engine.tensor_parallel_size:
        raise ConfigError(f"config error at runtime.ray_engine_gpus: "
                          f"engine.tensor_parallel_size={engine.tensor_parallel_size} shards "
                          f"the model over that many GPUs; the engine actor has "
                          f"{rt.ray_engine_gpus:g}")


def _torchrun_world() -> int:
    """The number of processes torchrun started (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1")) if "TORCHELASTIC_RUN_ID" in os.environ else 1


def _learner_ranks(cfg: Config) -> int:
    """runtime.learner_ranks, checked against how this process was launched."""
    rt, world = cfg.runtime, _torchrun_world()
    if world > 1 and cfg.stages:
        raise ConfigError("config error at stages: a torchrun launch trains one run; launch each "
                          "stage's `practicum train` under torchrun instead")
    if world > 1 and (rt.learner_ranks != world or rt.ray_learner != "driver"):
        raise ConfigError(f"config error at runtime.learner_ranks: torchrun started {world} "
                          f"processes, so set runtime.learner_ranks={world} (with "
                          "runtime.ray_learner=driver: the ranks are torchrun's)")
    if world == 1 and rt.learner_ranks > 1 and (rt.backend != "ray"
                                                or rt.ray_learner != "actor"):
        raise ConfigError(f"config error at runtime.learner_ranks: {rt.learner_ranks} ranks run "
                          "as a Ray actor group (runtime.backend=ray, runtime.ray_learner=actor) "
                          f"or under `torchrun --nproc-per-node {rt.learner_ranks}`")
    return rt.learner_ranks


def serve_learner_rank(cfg: Config) -> bool:
    """Under torchrun, a rank above 0 serves the learner's calls here until rank 0 (the driver)
    closes the group; True when this process was such a rank (it has nothing else to do)."""
    if _torchrun_world() == 1 or int(os.environ.get("RANK", "0")) == 0:
        return False
    from practicum.runtime.learner_group import follow

    _learner_ranks(cfg)
    follow(cfg, policy_config(cfg), cfg.runtime.learner_collective_timeout_s)
    return True


def _place_learner(cfg: Config, policy, ranks: int) -> Learner:
    rt = cfg.runtime
    if ranks > 1 and _torchrun_world() > 1:
        from practicum.runtime.learner_group import TorchrunLearner

        return TorchrunLearner(cfg, policy, rt.learner_collective_timeout_s)
    if ranks > 1:
        from practicum.runtime.learner_group import RayLearnerGroup

        return RayLearnerGroup(cfg, policy, ranks, cpus=rt.ray_learner_cpus,
                               gpus=rt.ray_learner_gpus, timeout=rt.ray_call_timeout_s,
                               collective_timeout=rt.learner_collective_timeout_s,
                               address=rt.ray_address, export_refs=rt.ray_engine == "actor")
    if rt.ray_learner == "actor":
        from practicum.runtime.ray_learner import RayLearner

        return RayLearner(cfg, policy, cpus=rt.ray_learner_cpus, gpus=rt.ray_learner_gpus,
                          timeout=rt.ray_call_timeout_s, address=rt.ray_address,
                          export_refs=rt.ray_engine == "actor")
    from practicum.learner import Learner as LocalLearner

    return LocalLearner(load_trainable(policy), cfg)


def _place_sampler(cfg: Config, policy, learner: Learner, in_process: bool) -> Sampler:
    rt = cfg.runtime
    if rt.ray_engine == "actor":
        from practicum.runtime.ray_envs import refuse_cpu_fallback

        if cfg.engine.replicas > 1:
            from practicum.runtime.replicas import EngineReplicas

            sampler: Any = EngineReplicas.start(cfg.engine, policy, n=cfg.engine.replicas,
                                                cpus=rt.ray_engine_cpus,
                                                gpus=rt.ray_engine_gpus,
                                                timeout=rt.ray_call_timeout_s,
                                                address=rt.ray_address)
        else:
            from practicum.runtime.ray_engine import RayEngine

            sampler = RayEngine(cfg.engine, policy, cpus=rt.ray_engine_cpus,
                                gpus=rt.ray_engine_gpus, timeout=rt.ray_call_timeout_s,
                                address=rt.ray_address)
        try:
            refuse_cpu_fallback(rt.ray_engine_gpus, "runtime.ray_engine_gpus", policy.device)
        except BaseException:
            sampler.close()
            raise
    elif in_process:  # may share the trainable's weights: holds version 0
        return build_sampler(cfg.engine, policy, learner.trainable)
    else:
        sampler = build_sampler(cfg.engine, policy)
    try:
        sampler.load_weights(learner.export_weights(0))
    except BaseException:
        sampler.close()
        raise
    return sampler


def place_envs(placement: Placement, cfg: Config, suite: Suite, ctx: SuiteContext) -> None:
    """runtime.backend=ray: point `suite.make_env` at Ray env workers, warmed for the runtime's
    number of environments in flight; local: nothing to do (environments run here)."""
    rt = cfg.runtime
    if rt.backend != "ray":
        return
    from practicum.runtime.ray_envs import use_ray

    warm = rt.num_actors if rt.mode == "async" else \
        cfg.rollout.group_size * cfg.rollout.tasks_per_step
    placement.envs = use_ray(suite, cfg.task.name, cfg.task.options, ctx, rt.ray_address,
                             rt.ray_env_cpus, warm=warm, call_timeout=rt.ray_call_timeout_s)
