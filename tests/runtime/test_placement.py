"""Placement: where each part runs is decided in one module, from the config, before loading."""

import ast
from pathlib import Path

import pytest

import practicum
from practicum.config import load_config
from practicum.errors import ConfigError
from practicum.runtime.placement import Placement, place

SRC = Path(practicum.__file__).parent
PLACEMENT_KEYS = {"ray_engine", "ray_learner", "ray_engine_gpus", "ray_learner_gpus",
                  "ray_engine_cpus", "ray_learner_cpus", "learner_ranks"}


def placement_reads(path: Path) -> set[str]:
    """The placement settings a module reads: runtime.ray_* keys, runtime.backend, engine.kind."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value.attr if isinstance(node.value, ast.Attribute) else \
            getattr(node.value, "id", "")
        if node.attr in PLACEMENT_KEYS or (node.attr == "backend" and owner in ("runtime", "rt")) \
                or (node.attr == "kind" and owner == "engine"):
            found.add(node.attr)
    return found


def test_placement_flags_are_read_in_the_placement_module_only():
    """Nothing in the runtime, the loop or the session branches on where a part runs."""
    readers = {path.name: placement_reads(path) for path in (SRC / "runtime").glob("*.py")
               if path.name != "placement.py"}
    readers = {k: v for k, v in readers.items() if v}
    # the summary names the backend it ran with: a report, not a branch
    assert readers == {"session.py": {"backend"}}
    assert placement_reads(SRC / "runtime" / "placement.py") >= {"ray_engine", "ray_learner",
                                                                 "backend", "kind"}


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


def test_an_in_process_placement_shares_the_trainable_and_holds_version_0(tiny_model_dir):
    from practicum.engine.hf import HFSampler
    from practicum.learner import Learner

    cfg = load_config(None, [f"model.model={tiny_model_dir}", "model.dtype=float32",
                             "model.device=cpu", "model.merged_sampling=false"])
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
    p = Placement(FakePart("learner", log), FakePart("sampler", log, fail=True), None,
                  envs=FakePart("envs", log))
    assert p.metrics() == {"envs_m": 1.0, "sampler_m": 1.0, "learner_m": 1.0}
    assert p.summary() == {"envs": {"ok": True}, "sampler": {"ok": True},
                           "learner": {"ok": True}}
    with pytest.raises(RuntimeError, match="sampler failed to close"):
        p.close()
    assert log == ["envs", "sampler", "learner"]
    p.close()
    assert log == ["envs", "sampler", "learner"]


def test_learner_ranks_need_a_ray_group_or_a_torchrun_launch(monkeypatch, tmp_path):
    """Refused by key before anything loads: N ranks without Ray actors or torchrun, and a
    torchrun launch whose process count the config does not name."""
    from practicum.runtime.placement import serve_learner_rank

    cfg = load_config(None, ["runtime.learner_ranks=2", f"run.out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^config error at runtime.learner_ranks: 2 ranks run "
                                          r"as a Ray actor group .* or under `torchrun"):
        place(cfg)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"^config error at runtime.learner_ranks: torchrun "
                                          r"started 4 processes, so set "
                                          r"runtime.learner_ranks=4"):
        serve_learner_rank(cfg)  # a follower refuses as rank 0 does, before joining
    monkeypatch.setenv("RANK", "0")
    assert serve_learner_rank(cfg) is False  # rank 0 drives: placement refuses it there
    with pytest.raises(ConfigError, match="torchrun started 4 processes"):
        place(cfg)
