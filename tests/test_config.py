import pytest

from practicum.config import ConfigError, load_config


def test_defaults_are_valid():
    cfg = load_config()
    assert cfg.model.model == "smollm2-135m-instruct"
    assert cfg.runtime.mode == "sync" and not cfg.use_duration_weights


def test_dotted_overrides_are_typed():
    cfg = load_config(None, ["train.lr=1e-4", "runtime.mode=async", "task.generators={chain_sum: 1}"])
    assert cfg.train.lr == 1e-4
    assert cfg.use_duration_weights  # on by default in async mode
    assert cfg.task.generators == {"chain_sum": 1}


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
