"""Shared fixtures: a tiny random Llama with the real SmolLM2 tokenizer (and its peaked variant),
and the real SmolLM2."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import shutil
import tempfile

import pytest
import torch

_SESSION_TMP: str | None = None


def pytest_configure(config):
    """Every temp file of the session, ours and those of the libraries and processes the tests
    start (torchrun's error files, vLLM's sockets, Ray's session), goes to one folder removed
    at the end, so the suite leaves nothing in /tmp. Practicum's own leftovers are still caught
    first (`nothing_left_behind`)."""
    global _SESSION_TMP
    if _SESSION_TMP is None and "PRACTICUM_TEST_TMP" not in os.environ:
        _SESSION_TMP = tempfile.mkdtemp(prefix="pt-")  # short: Ray's socket paths must fit
        os.environ["TMPDIR"] = os.environ["PRACTICUM_TEST_TMP"] = _SESSION_TMP
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_unconfigure(config):
    """The folder goes at exit, after multiprocessing removed its own `pymp-*` folder in it
    (its finalizers run by priority; removing it first makes that one fail loudly)."""
    if _SESSION_TMP is not None:
        from multiprocessing.util import Finalize

        Finalize(
            None,
            shutil.rmtree,
            args=(_SESSION_TMP,),
            kwargs={"ignore_errors": True},
            exitpriority=-101,
        )


TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
    "initializer_range": 0.1,  # > 0.02: logits spread out, so greedy has no near-ties
}
"""The tiny model: ~3.2M parameters, almost all in the 49,152 x 64 tied embedding."""


def build_tiny_model(folder: Path, seed: int = 0, **overrides) -> Path:
    """Save a random tiny Llama with the SmolLM2 tokenizer into `folder` (a HF model folder);
    `overrides`: LlamaConfig fields other than TINY's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.models import load_builtin_tokenizer

    tokenizer = load_builtin_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**TINY, **overrides},
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random tiny Llama (2 layers, hidden 64, SmolLM2 tokenizer and chat template), fp32."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def peaked_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny random model with embeddings scaled x4: its next-token distribution has ~5 nats
    of entropy instead of ~10.8, so RL credit concentrates on tokens it actually samples and a
    few steps move the toy reward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("peaked")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(4)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The real SmolLM2-135M-Instruct folder (converted from the GGUF once per machine, ~35 s)."""
    from practicum.engine.models import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(request):
    """After the whole session: no practicum temp file or folder this process created is left,
    and no child process is still running ("nothing left behind"). Compares against what
    existed before, for this process's own paths only (recorded by an audit hook), so runs
    sharing the temp folder do not disturb it. Skipped when tests failed (a failed test's
    traceback may still hold an env)."""
    import gc

    from practicum.audit.leftovers import TempWatch, descendants, lingering_children

    TempWatch.install()
    before_paths, before_children = set(TempWatch.remaining()), {p for p, _ in descendants()}
    yield
    if request.session.testsfailed:
        return
    gc.collect()  # envs dropped without close remove their folders with their finalizers
    paths = [p for p in TempWatch.remaining() if p not in before_paths]
    children = lingering_children(grace=10.0, ignore=before_children)
    if paths or children:
        pytest.fail(
            f"left behind after the test session: {paths[:10]} "
            f"{len(paths)} paths; processes {children[:10]}",
            pytrace=False,
        )
