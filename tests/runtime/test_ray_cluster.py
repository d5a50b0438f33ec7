"""ray_cluster.py: a Ray plan's actors refused a GPU they need, by key, before any starts."""

import pytest

from practicum.config import load_config
from practicum.errors import ConfigError
from practicum.runtime.ray_cluster import RayCluster, refuse_cpu_fallback


def test_an_actor_without_a_gpu_is_refused_where_gpus_exist(monkeypatch, tmp_path):
    """A Ray cluster that declares a GPU: actors asked for 0 GPUs would silently run on the
    CPU, so placing the run refuses them by key before any actor starts; the caller's Ray is
    left running."""
    import ray

    import practicum.runtime.placement as placement

    def no_actor(*a, **k):
        raise AssertionError("an actor was started")

    monkeypatch.setattr(placement, "_place_learner", no_actor)
    ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        for plan, key in (
            (["placement.kind=ray", "placement.learner.cpus=0"], "learner"),
            (["placement.kind=learner_group", "placement.ranks=2"], "rank"),
            (["placement.kind=ray", "placement.engine.replicas=2"], "engine"),
        ):
            cfg = load_config(None, [*plan, f"run.out_dir={tmp_path}"])
            with pytest.raises(
                ConfigError,
                match=rf"^config error at placement.{key}.gpus: 0, "
                r"but the Ray cluster has 1 GPU\(s\)",
            ):
                placement.place(cfg)
        assert ray.is_initialized()  # the caller's Ray is left running
        cpu = load_config(
            None, ["placement.kind=ray", "placement.learner.gpus=0", "model.device=cpu"]
        )
        RayCluster.join(cpu.placement, "cpu").close()  # CPU on purpose: fine
        refuse_cpu_fallback(1, "placement.learner.gpus", "auto")  # given a GPU: fine
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_a_refused_plan_stops_the_ray_it_started():
    """A CUDA model.device with an engine actor of 0 GPUs cannot work: refused by key, and
    the Ray this call started is stopped again."""
    import ray

    cfg = load_config(None, ["placement.kind=ray", "placement.engine.gpus=0"])
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.engine.gpus: 0, but "
        r"model.device is 'cuda:1'",
    ):
        RayCluster.join(cfg.placement, "cuda:1")
    assert not ray.is_initialized()
