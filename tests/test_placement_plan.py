"""The `placement:` plan: its variants, its checks, the old flat keys refused in new input and
migrated in a run folder's stored config."""

from pathlib import Path

import pytest
import yaml

from practicum.config import Config, dump_config, load_config
from practicum.errors import ConfigError
from practicum.placement_plan import OLD_KEYS
from practicum.stages import stage_config

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, tree: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(tree))
    return path


def test_each_variant_reads_from_yaml(tmp_path):
    plans = {
        "local": "{kind: local}",
        "ray": "{kind: ray, address: auto, envs: {cpus: 0.5}, engine: {gpus: 1, replicas: 2}, "
        "learner: {cpus: 2, gpus: 1}}",
        "learner_group": "{kind: learner_group, ranks: 4, rank: {cpus: 2, gpus: 1}, "
        "collective_timeout_s: 300, engine: {gpus: 1}}",
        "torchrun": "{kind: torchrun, ranks: 8}",
        "torchrun_nodes": "{kind: torchrun, ranks: 8, nodes: 2, mesh: {replicate: 2}, "
        "network: {address: 10.0.0.2, interface: eth0}, "
        "sampler_device: cuda:0}",
    }
    got = {}
    for kind, text in plans.items():
        path = tmp_path / f"{kind}.yaml"
        path.write_text(f"placement: {text}\n")
        got[kind] = load_config(path).placement
    assert got["local"].env_actors is None and not got["local"].on_ray
    ray = got["ray"]
    assert (
        ray.address,
        ray.envs.cpus,
        ray.engine.gpus,
        ray.engine.replicas,
        ray.engine.cpus,
        ray.learner.gpus,
        ray.call_timeout_s,
    ) == ("auto", 0.5, 1, 2, 1, 1, 1800)
    group = got["learner_group"]
    assert (
        group.ranks,
        group.rank.cpus,
        group.collective_timeout_s,
        group.envs.cpus,
        group.engine.replicas,
    ) == (4, 2, 300, 0, 1)
    assert got["torchrun"].ranks == 8 and not got["torchrun"].on_ray
    assert (got["torchrun"].nodes, got["torchrun"].learner_mesh.replicate) == (1, 1)
    nodes = got["torchrun_nodes"]
    assert (
        nodes.nodes,
        nodes.learner_mesh.replicate,
        nodes.network.address,
        nodes.network.interface,
        nodes.sampler_device,
    ) == (2, 2, "10.0.0.2", "eth0", "cuda:0")
    assert (group.strategy, group.learner_mesh.replicate) == ("PACK", 1)
    assert got["local"].learner_mesh.replicate == 1  # the learner of a one-rank group
    assert load_config(None).placement.kind == "local"  # the default
    # the plan a run folder records reads back as the same plan
    cfg = load_config(tmp_path / "ray.yaml")
    dump_config(cfg, tmp_path / "dumped.yaml")
    assert load_config(tmp_path / "dumped.yaml").placement == ray


def test_the_checks_across_sections_name_their_keys():
    bad = {
        ("placement.kind=ray", "placement.envs=null"): "placement.kind=ray with envs, engine "
        "and learner all null puts nothing in a Ray actor",
        (
            "placement.kind=torchrun",
            "placement.ranks=2",
            "stages=[{name: a, kind: rl}]",
        ): "placement.kind=torchrun trains one run per launch",
        (
            "placement={kind: torchrun, ranks: 2}",
            "engine.kind=vllm",
            "model.lora=false",
            "engine.weight_sync=broadcast",
            "model.device=cuda",
        ): "engine.weight_sync=broadcast under torchrun: vLLM in rank 0 starts on the node's "
        "first GPU",
        (
            "placement.kind=ray",
            "placement.engine.gpus=1",
            "engine.kind=vllm",
            "engine.tensor_parallel_size=2",
        ): "placement.engine.gpus=1: engine.tensor_parallel_size=2",
        (
            "placement={kind: torchrun, ranks: 4, mesh: {replicate: 3}}",
        ): r"placement.mesh.replicate=3: ranks=4 is not a multiple of it \(ranks = replicate "
        r"x shard\)",
        (
            "placement={kind: torchrun, ranks: 4, mesh: {replicate: 2, sequence: 3}}",
        ): r"placement.mesh.sequence=3: each copy's 2 ranks \(ranks / mesh.replicate\) do not "
        r"split into sequence groups of that many",
        ("placement={kind: learner_group, ranks: 6, nodes: 1}",): None,
        (
            "placement={kind: torchrun, ranks: 6, nodes: 4}",
        ): r"placement.nodes=4: ranks=6 is not a multiple of it",
        (
            "placement={kind: learner_group, ranks: 2, network: {address: 10.0.0.2}}",
        ): r"placement.network.address: a Ray group's ranks bind to their Ray node's address",
    }
    for overrides, message in bad.items():
        if message is None:  # a key of another variant: refused by name
            with pytest.raises(
                ConfigError,
                match=r"^config error at placement.nodes: unknown "
                r"key for placement.kind=learner_group",
            ):
                load_config(None, list(overrides))
            continue
        with pytest.raises(ConfigError, match=f"^config error: {message}"):
            load_config(None, list(overrides))
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.ranks: Field required "
        r"for placement.kind=learner_group",
    ):
        load_config(None, ["placement.kind=learner_group"])


def test_an_old_key_in_new_input_is_refused_naming_its_new_place(tmp_path):
    path = write(tmp_path / "mine.yaml", {"runtime": {"backend": "ray", "ray_engine": "actor"}})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (
        "config error at runtime.backend: moved to the placement section (placement: {kind: "
        'local | ray | learner_group | torchrun, ...}; README "Placement"): runtime.backend '
        "-> placement.kind, runtime.ray_engine -> placement.engine (a section: engine actors; "
        "null: here)"
    )
    for key in OLD_KEYS:  # every one of them, as an override and in a stage's overrides
        with pytest.raises(
            ConfigError,
            match=f"^config error at {key}: moved to the placement section .*{key} -> placement",
        ):
            load_config(None, [f"{key}=1"])
        with pytest.raises(ConfigError, match=rf"^config error at stages\[0\].overrides.{key}: "):
            load_config(None, [f"stages=[{{name: a, kind: rl, overrides: {{{key}: 1}}}}]"])


def old_run_config(**old) -> dict:
    """A config.yaml as runs wrote it before the placement section: every section in full, the
    twelve flat runtime keys (defaults unless given) and engine.replicas."""
    tree = Config().model_dump(mode="json")
    del tree["placement"]
    tree["runtime"].update(
        {
            "backend": "local",
            "ray_address": None,
            "ray_env_cpus": 0.0,
            "ray_engine": "driver",
            "ray_engine_cpus": 1.0,
            "ray_engine_gpus": 0.0,
            "ray_learner": "driver",
            "ray_learner_cpus": 1.0,
            "ray_learner_gpus": 0.0,
            "learner_ranks": 1,
            "learner_collective_timeout_s": 600.0,
            "ray_call_timeout_s": 1800.0,
        }
    )
    tree["engine"]["replicas"] = old.pop("replicas", 1)
    tree["runtime"].update(old)
    return tree


SHARDED = {"mesh": {"replicate": 1, "sequence": 1}, "network": {"address": None, "interface": None}}
"""What the old keys had no say in: full sharding, the libraries' addresses."""

MIGRATIONS = [
    ({}, {"kind": "local"}),
    (
        {"backend": "ray", "ray_address": "auto", "ray_env_cpus": 0.5, "ray_call_timeout_s": 60},
        {
            "kind": "ray",
            "address": "auto",
            "call_timeout_s": 60,
            "envs": {"cpus": 0.5},
            "engine": None,
            "learner": None,
        },
    ),
    (
        {
            "backend": "ray",
            "ray_engine": "actor",
            "ray_engine_cpus": 2,
            "ray_engine_gpus": 1,
            "replicas": 4,
            "ray_learner": "actor",
            "ray_learner_gpus": 1,
        },
        {
            "kind": "ray",
            "address": None,
            "call_timeout_s": 1800,
            "envs": {"cpus": 0},
            "engine": {"cpus": 2, "gpus": 1, "replicas": 4},
            "learner": {"cpus": 1, "gpus": 1},
        },
    ),
    (
        {
            "backend": "ray",
            "ray_learner": "actor",
            "learner_ranks": 4,
            "ray_learner_cpus": 2,
            "ray_learner_gpus": 1,
            "learner_collective_timeout_s": 300,
        },
        {
            "kind": "learner_group",
            "address": None,
            "call_timeout_s": 1800,
            "envs": {"cpus": 0},
            "engine": None,
            "ranks": 4,
            "rank": {"cpus": 2, "gpus": 1},
            "collective_timeout_s": 300,
            "strategy": "PACK",
            **SHARDED,
        },
    ),
    (
        {"learner_ranks": 2},
        {
            "kind": "torchrun",
            "ranks": 2,
            "collective_timeout_s": 600,
            "nodes": 1,
            "sampler_device": None,
            **SHARDED,
        },
    ),
]


def test_a_stored_run_config_with_old_keys_is_migrated_on_read(tmp_path):
    """A run folder's config.yaml (what resume, eval and serve read) keeps working: each old
    layout becomes its plan; the same file outside a run folder is refused, and so is an old
    key given as an override to a stored config."""
    for i, (old, plan) in enumerate(MIGRATIONS):
        run = tmp_path / f"run{i}"
        path = write(run / "config.yaml", old_run_config(**old))
        (run / "metrics.jsonl").write_text("")
        assert load_config(path).placement.model_dump(mode="json") == plan
    loose = write(tmp_path / "copy" / "config.yaml", old_run_config())
    with pytest.raises(ConfigError, match="^config error at runtime.backend: moved"):
        load_config(loose)
    with pytest.raises(ConfigError, match="^config error at runtime.ray_engine: moved"):
        load_config(tmp_path / "run0" / "config.yaml", ["runtime.ray_engine=actor"])


def test_a_stored_pipeline_moves_a_stage_override_of_old_keys_into_its_plan(tmp_path):
    tree = old_run_config(backend="ray")
    tree["stages"] = [
        {
            "name": "rl",
            "kind": "rl",
            "overrides": {"runtime.ray_engine": "actor", "engine.replicas": 2, "train.lr": 1e-4},
        }
    ]
    path = write(tmp_path / "run" / "config.yaml", tree)
    (tmp_path / "run" / "checkpoints").mkdir()
    cfg = load_config(path)
    assert cfg.placement.kind == "ray" and cfg.placement.engine is None
    assert set(cfg.stages[0].overrides) == {"train.lr", "placement"}
    stage = stage_config(cfg, 0, None)
    assert stage.placement.engine.replicas == 2 and stage.placement.envs.cpus == 0
    assert stage.train.lr == 1e-4


def test_every_bundled_config_reads_without_an_old_key():
    paths = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(paths) >= 6
    for path in paths:
        tree = yaml.safe_load(path.read_text())
        assert not [k for k in OLD_KEYS if k.split(".")[1] in (tree.get(k.split(".")[0]) or {})]
        load_config(path)
    multi = load_config(ROOT / "configs" / "multi_gpu.yaml").placement
    assert (multi.kind, multi.ranks, multi.rank.gpus, multi.engine.replicas) == (
        "learner_group",
        4,
        1,
        4,
    )
