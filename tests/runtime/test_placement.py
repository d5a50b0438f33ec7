"""Placement: where each part runs is decided in one module, from the config, before loading."""

import ast
from pathlib import Path

import pytest

import practicum
from practicum.config import load_config
from practicum.errors import ConfigError
from practicum.runtime.placement import Placement, place

SRC = Path(practicum.__file__).parent


def plan_reads(path: Path) -> int:
    """How often a module reads the placement plan (`cfg.placement`, `x.cfg.placement`) or
    the engine kind (`engine.kind`)."""
    found = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = (
            node.value.attr
            if isinstance(node.value, ast.Attribute)
            else getattr(node.value, "id", "")
        )
        found += (node.attr == "placement" and owner == "cfg") or (
            node.attr == "kind" and owner == "engine"
        )
    return found


def test_the_plan_is_read_in_the_placement_module_only():
    """Nothing in the runtime, the loop or the session branches on where a part runs."""
    readers = {
        path.name: plan_reads(path)
        for path in (SRC / "runtime").glob("*.py")
        if path.name != "placement.py"
    }
    # the summary names the plan's kind it ran with: a report, not a branch
    assert {k: v for k, v in readers.items() if v} == {"session.py": 1}
    assert plan_reads(SRC / "runtime" / "placement.py") >= 5


def test_a_device_the_machine_lacks_is_refused_before_anything_loads(monkeypatch, tmp_path):
    import practicum.engine.factory as factory

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(factory, "load_lm", no_loading)
    monkeypatch.setattr(factory, "resolve_model", no_loading)
    cfg = load_config(None, ["model.device=cuda:7", f"run.out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^config error at model.device: ") as e:
        place(cfg)
    assert "\n" not in str(e.value)


def test_environments_that_keep_state_are_refused_in_ray_actors_before_anything_loads(monkeypatch):
    import practicum.engine.factory as factory
    from practicum.envs.registry import Suite

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(factory, "load_lm", no_loading)
    monkeypatch.setattr(factory, "resolve_model", no_loading)
    stateful = Suite(lambda models: None, [], [], state=dict, load_state=lambda s: None)
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.envs: environment "
        r"'calculator' keeps state .* placement.envs: null",
    ):
        place(load_config(None, ["placement.kind=ray"]), stateful)


def test_an_in_process_placement_shares_the_trainable_and_holds_version_0(tiny_model_dir):
    from practicum.engine.hf import HFSampler
    from practicum.learner import Learner

    cfg = load_config(
        None,
        [
            f"model.model={tiny_model_dir}",
            "model.dtype=float32",
            "model.device=cpu",
            "model.merged_sampling=false",
        ],
    )
    p = place(cfg)
    try:
        assert isinstance(p.learner, Learner) and isinstance(p.sampler, HFSampler)
        assert p.sampler.lm is p.learner.trainable.lm and p.sampler.version == 0
        assert p.tokenizer is p.learner.trainable.tokenizer
        assert p.parts == [p.sampler, p.learner] and p.metrics() == {} and p.summary() == {}
    finally:
        p.close()


class FakePart:
    def __init__(self, name, log, fail=False):
        self.name, self.log, self.fail = name, log, fail

    def metrics(self):
        return {f"{self.name}_m": 1.0}

    def summary(self):
        return {self.name: {"ok": True}}

    def close(self):
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} failed to close")


def test_every_part_is_closed_once_in_reverse_start_order_even_when_one_fails():
    log = []
    p = Placement(
        FakePart("learner", log),
        FakePart("sampler", log, fail=True),
        None,
        envs=FakePart("envs", log),
    )
    assert p.metrics() == {"envs_m": 1.0, "sampler_m": 1.0, "learner_m": 1.0}
    assert p.summary() == {"envs": {"ok": True}, "sampler": {"ok": True}, "learner": {"ok": True}}
    with pytest.raises(RuntimeError, match="sampler failed to close"):
        p.close()
    assert log == ["envs", "sampler", "learner"]
    p.close()
    assert log == ["envs", "sampler", "learner"]


def test_a_launch_that_does_not_match_the_plan_is_refused_before_anything_loads(
    monkeypatch, tmp_path
):
    """torchrun ranks without torchrun, and a torchrun launch whose process count the plan
    does not name, are refused by key (a follower refuses as rank 0 does, before joining)."""
    from practicum.runtime.placement import serve_learner_rank

    torchrun = load_config(
        None, ["placement.kind=torchrun", "placement.ranks=2", f"run.out_dir={tmp_path}"]
    )
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.kind: torchrun ranks "
        r"are the processes of `torchrun --nnodes 1 "
        r"--nproc-per-node 2",
    ):
        place(torchrun)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    for cfg in (torchrun, load_config(None, [f"run.out_dir={tmp_path}"])):
        with pytest.raises(
            ConfigError,
            match=r"^config error at placement: torchrun started 4 "
            r"processes, so set placement: \{kind: torchrun, "
            r"ranks: 4\}$",
        ):
            serve_learner_rank(cfg)
    monkeypatch.setenv("RANK", "0")
    assert serve_learner_rank(torchrun) is False  # rank 0 drives: placement refuses it there
    with pytest.raises(ConfigError, match="torchrun started 4 processes"):
        place(torchrun)
    # 4 processes on 2 nodes, where the plan has 1 node of 4 (or 4 nodes of 1)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    for nodes in (1, 4):
        cfg = load_config(None, [f"placement={{kind: torchrun, ranks: 4, nodes: {nodes}}}"])
        with pytest.raises(
            ConfigError,
            match=rf"^config error at placement.nodes: torchrun "
            rf"started 2 node\(s\) with 2 process\(es\) on "
            rf"this one, the plan has {nodes} node\(s\) of "
            rf"{4 // nodes} \(ranks=4\): launch `torchrun "
            rf"--nnodes {nodes} --nproc-per-node {4 // nodes}",
        ):
            serve_learner_rank(cfg)


def test_rank_0s_sampler_gets_a_gpu_no_learner_rank_takes_or_the_launch_is_refused():
    """Under torchrun the node's learner ranks take cuda:0..L-1 (LOCAL_RANK); the sampler in
    rank 0 takes the next GPU, or a GPU the plan names (sharing one knowingly); a node with no
    GPU left, or vLLM (which starts on the first GPUs whatever it is told), is refused in one
    line naming the GPUs."""
    from practicum.runtime.placement import torchrun_sampler_device

    def device(
        plan: str, engine: str = "hf", model_device: str = "cuda", local: int = 4, gpus: int = 8
    ) -> str:
        cfg = load_config(None, [f"placement={{kind: torchrun, ranks: 8, nodes: 2{plan}}}"])
        return torchrun_sampler_device(cfg.placement, engine, model_device, local, gpus)

    assert device("") == "cuda:4"
    assert device("", model_device="cpu") == "cpu"
    assert device(", sampler_device: cuda:0", gpus=4) == "cuda:0"
    with pytest.raises(ConfigError) as e:
        device("", gpus=4)
    assert str(e.value) == (
        "config error at placement.sampler_device: the 4 learner ranks on rank 0's node take "
        "cuda:0-3, all of its 4 GPU(s), leaving none for rank 0's sampler: launch one process "
        "fewer per node (--nproc-per-node 3 and placement.ranks to match), or set "
        "placement.sampler_device: cuda:0 (shared with learner rank 0) or cpu"
    )
    with pytest.raises(
        ConfigError,
        match=r"^config error at placement.sampler_device: vLLM in "
        r"rank 0 starts on this node's first GPU\(s\), which "
        r"learner ranks use \(cuda:0-3\)",
    ):
        device("", engine="vllm")
    assert device(", sampler_device: cuda:0", engine="vllm") == "cuda:0"
    with pytest.raises(ConfigError, match="cuda:5, but vLLM in rank 0 starts on"):
        device(", sampler_device: cuda:5", engine="vllm")
