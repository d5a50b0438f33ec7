"""Ray start-up and its checks: the one place that starts or joins Ray for a run.

    cluster = RayCluster.join(plan, device)   # placement.kind ray / learner_group
    ...                                       # actors: env workers, engines, the learner
    cluster.close()                           # stops Ray if this run started it

`join` starts a local Ray (placement.address null) or joins a cluster, then refuses, by key,
every actor of the plan that asks for no GPU where the cluster has some (it would quietly run on
the CPU), before any actor starts. The actor classes (`ray_envs`, `ray_engine`, `replicas`,
`ray_learner`, `learner_group`) call `start_ray` too, so each also works on its own (tests,
benchmarks): inside a run they find this Ray running and leave it to the cluster.
"""

from __future__ import annotations

import os

from practicum.errors import ConfigError

START_SECONDS = 600.0
"""Starting an actor (importing, building a suite or loading a model) may take at least this
long, whatever the call timeout (meant for the calls themselves)."""


def require_ray(key: str) -> None:
    """ConfigError naming `key` when the ray package is missing."""
    from importlib.util import find_spec

    if find_spec("ray") is None:
        raise ConfigError(
            f"config error at {key}: Ray actors need the ray package (pip install 'practicum[ray]')"
        )


def start_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join the running Ray, else start one (local, or the cluster at `address`); True when
    this call started it (the caller then shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    if address is None:
        # "local": a Ray of its own, never one a `ray start` left on this machine (which
        # ray.init() alone would join, and then refuse num_cpus)
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
        )
    else:
        ray.init(address=address, log_to_driver=False)
    return True


def refuse_cpu_fallback(gpus: float, key: str, device: str) -> None:
    """An actor given `gpus` GPUs (the value of `key`) on the running Ray: 0 on a cluster that
    has GPUs would quietly run on the CPU, refused unless model.device (`device`) says cpu; 0
    with a CUDA model.device cannot work."""
    import ray

    have = ray.cluster_resources().get("GPU", 0)
    if gpus == 0 and have > 0 and device != "cpu":
        raise ConfigError(
            f"config error at {key}: 0, but the Ray cluster has {have:g} GPU(s): "
            f"the actor would run on the CPU (set {key}: 1, or model.device: cpu "
            "to mean it)"
        )
    if gpus == 0 and device.startswith("cuda"):
        raise ConfigError(
            f"config error at {key}: 0, but model.device is {device!r}: an "
            f"actor without a GPU cannot use one (set {key}: 1)"
        )


def actor_gpus(plan) -> dict[str, float]:
    """The GPUs each GPU-using actor of a Ray plan asks for, by the key that sets them."""
    from practicum.placement_plan import LearnerGroupPlacement, RayPlacement

    out = {}
    if plan.engine_actors is not None:
        out["placement.engine.gpus"] = plan.engine_actors.gpus
    if isinstance(plan, RayPlacement) and plan.learner is not None:
        out["placement.learner.gpus"] = plan.learner.gpus
    if isinstance(plan, LearnerGroupPlacement):
        out["placement.rank.gpus"] = plan.rank.gpus
    return out


class RayCluster:
    """The Ray a run's actors live on, as a part of the placement (closed after them)."""

    def __init__(self, address: str | None, own: bool):
        self.address, self.own = address, own

    @classmethod
    def join(cls, plan, device: str) -> RayCluster:
        """Start or join the plan's Ray and check its actors' GPUs (module doc); a refused
        plan leaves no Ray running that this call started."""
        cluster = cls(plan.address, start_ray(plan.address))
        try:
            for key, gpus in actor_gpus(plan).items():
                refuse_cpu_fallback(gpus, key, device)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def metrics(self) -> dict[str, float]:
        return {}

    def summary(self) -> dict:
        return {}

    def close(self) -> None:
        """Stop Ray if this run started it."""
        import ray

        if self.own:
            self.own = False
            ray.shutdown()
