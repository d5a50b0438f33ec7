"""A served run folder: a tiny random Llama with a LoRA adapter far from zero, behind the API."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def save_run(
    model_dir: Path, run: Path, step: int = 3, std: float = 0.05, dtype: str = "float32"
) -> Path:
    """A run folder whose latest checkpoint holds a LoRA adapter with random (nonzero) weights,
    so the policy and its base sample differently."""
    from practicum.engine.hf import PolicyConfig, load_hf_engine

    trainable, _ = load_hf_engine(PolicyConfig(model=str(model_dir), dtype=dtype))
    torch.manual_seed(1)
    for p in trainable.trainable_parameters():
        torch.nn.init.normal_(p, std=std)
    ckpt = run / "checkpoints" / f"step_{step:06d}"
    trainable.save(ckpt / "policy")
    torch.save({"step": step}, ckpt / "trainer.pt")
    (run / "checkpoints" / "latest").write_text(ckpt.name)
    return run


def build_long_tiny_model(folder: Path) -> Path:
    """The tests' tiny random Llama with room for agent-sized prompts (8192 positions)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.models import load_builtin_tokenizer

    from ..conftest import TINY

    tokenizer = load_builtin_tokenizer()
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            **{**TINY, "max_position_embeddings": 8192},
        )
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_run(tiny_model_dir, tmp_path_factory) -> Path:
    return save_run(tiny_model_dir, tmp_path_factory.mktemp("runs") / "calc")


@pytest.fixture(scope="session")
def api(tiny_run):
    """(served engine, OpenAI client) against a server on a free port, shared by the modules
    that drive the API (a test that changes `served` restores it)."""
    from openai import OpenAI

    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served

    served = load_served(tiny_run, dtype="float32")
    with ServerThread(build_app(served)) as url:
        yield served, OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    served.close()
