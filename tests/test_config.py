import pytest

from practicum.config import ConfigError, load_config


def test_defaults_are_valid_and_resolved():
    cfg = load_config()
    assert cfg.model.model == "smollm2-135m-instruct" and cfg.runtime.mode == "sync"
    assert cfg.algo.advantage == "grpo" and cfg.algo.dynamic_sampling
    assert not cfg.algo.duration_weights  # no duration bias to remove (duration_bias.py)
    assert cfg.task.options["train_size"] == 2000  # the env's options, resolved


def test_dotted_overrides_are_typed():
    cfg = load_config(
        None, ["train.lr=1e-4", "runtime.mode=async", "task.options.generators={chain_sum: 1}"]
    )
    assert cfg.train.lr == 1e-4 and cfg.runtime.mode == "async"
    assert cfg.task.options["generators"] == {"chain_sum": 1}


def test_streaming_resolves_its_own_defaults():
    cfg = load_config(None, ["runtime.mode=async", "rollout.batching=streaming"])
    assert cfg.algo.advantage == "baseline" and cfg.algo.dynamic_sampling is False


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rollout.batching=streaming"], "needs runtime.mode=async"),
        (
            ["runtime.mode=async", "rollout.batching=streaming", "algo.advantage=grpo"],
            "needs complete groups",
        ),
        (
            ["runtime.mode=async", "rollout.batching=streaming", "algo.dynamic_sampling=true"],
            "streaming batches have none",
        ),
        (["train.mini_batches=100"], "exceeds the 24 episodes"),
    ],
)
def test_contradictions_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_environment_options_are_typed_and_errors_name_the_key_path():
    with pytest.raises(ConfigError, match=r"task\.options\.train_sizee: unknown calculator option"):
        load_config(None, ["task.options.train_sizee=3"])
    with pytest.raises(ConfigError, match=r"task\.options\.arms\.fast\.seconds"):
        load_config(
            None,
            [
                "task.name=timed_bandit",
                "task.options.arms={fast: {reward: 1, seconds: -1}, slow: {reward: 1, seconds: 1}}",
            ],
        )
    with pytest.raises(
        ConfigError,
        match=r"task\.name: unknown environment 'calculater' "
        r"\(known: .*calculator.*toy",
    ):
        load_config(None, ["task.name=calculater"])


def test_unknown_key_names_the_key():
    with pytest.raises(ConfigError, match=r"train\.lrr: unknown key"):
        load_config(None, ["train.lrr=1"])


def test_bad_value_names_the_key():
    with pytest.raises(ConfigError, match=r"runtime\.max_staleness"):
        load_config(None, ["runtime.max_staleness=two"])


def test_yaml_file_and_errors(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  steps: 3\nrollout:\n  group_size: 2\n")
    cfg = load_config(p, ["train.steps=4"])
    assert cfg.train.steps == 4 and cfg.rollout.group_size == 2
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(p)


def test_override_without_equals_is_rejected():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["train.lr"])


def test_weight_sync_broadcast_streams_full_weights_from_sharded_ranks_only():
    cfg = load_config(
        None,
        [
            "engine.weight_sync=broadcast",
            "model.lora=false",
            "engine.weight_bucket_mb=64",
            "placement.kind=learner_group",
            "placement.ranks=2",
        ],
    )
    assert cfg.streams_weights and cfg.engine.weight_bucket_mb == 64
    assert not load_config(
        None, ["engine.kind=vllm", "engine.weight_sync=broadcast", "model.lora=false"]
    ).streams_weights  # a learner here sends
    for extra, message in (
        (
            ["model.lora=true", "placement.kind=learner_group", "placement.ranks=2"],
            "sends full weights",
        ),
        (["model.lora=false"], r"\(hf\) streams from a sharded learner"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["engine.weight_sync=broadcast", *extra])
    with pytest.raises(ConfigError, match="engine.weight_bucket_mb"):
        load_config(None, ["engine.weight_bucket_mb=0"])


def test_a_token_budget_with_sequence_parallelism_is_refused_in_one_line():
    plan = ["placement.kind=torchrun", "placement.ranks=2", "placement.mesh.sequence=2"]
    assert load_config(None, plan).train.max_tokens_per_micro_batch is None
    assert (
        load_config(
            None, ["train.max_tokens_per_micro_batch=4096"]
        ).train.max_tokens_per_micro_batch
        == 4096
    )
    with pytest.raises(
        ConfigError,
        match=r"^config error: train.max_tokens_per_micro_batch: "
        r"packed micro-batches do not run with sequence parallelism",
    ):
        load_config(None, [*plan, "train.max_tokens_per_micro_batch=4096"])
