"""Host memory and seconds of one long row's learner step with sequence parallelism
(`placement.mesh.sequence`, `practicum.learner.sequence`): S gloo ranks on the CPU, S = 1, 2, 4,
rows of T tokens, a random Llama (8 query / 4 key-value heads, hidden 256, 4 layers, SmolLM2's
vocabulary), full fine-tuning, cross-entropy on every token after a 16-token prompt, the output
head's logits computed 256 positions at a time.

Each rank trains two steps on the row and records its peak RSS during the second (Linux VmHWM,
reset through /proc/self/clear_refs after the first, so the AdamW state and the gathered weights
of the first step are already there) above its RSS before it, and the second step's seconds.
The ranks run with MALLOC_MMAP_THRESHOLD_ at 1 MiB so that RSS follows the tensors alive
(`benchmarks/sharded_memory.py` explains why). Seconds on a shared CPU are not comparable: the
JSON records the machine's state.

    python benchmarks/sequence_parallel.py [--tokens 2048,8192] [--sizes 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO / "src"), str(REPO)]

SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}


def write_model(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.models import load_builtin_tokenizer

    tok = load_builtin_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **SHAPE,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


def rss_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def rank_main(rank: int, model: Path, tokens: int, size: int, out: Path) -> None:
    os.environ["RANK"] = str(rank)
    import random

    import torch

    torch.set_num_threads(1)
    from practicum.config import load_config
    from practicum.learner.rows import TrainBatch, TrainRow
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    placement = (
        [f"placement={{kind: torchrun, ranks: {size}, mesh: {{sequence: {size}}}}}"]
        if size > 1
        else []
    )
    cfg = load_config(
        None,
        [
            f"model.model={model}",
            "model.dtype=float32",
            "model.device=cpu",
            "model.lora=false",
            "train.grad_clip=1e6",
            *placement,
        ],
    )
    from practicum.engine.hf_trainable import HFTrainable

    # the output head's logits at most 256 rows at a time (recomputed in backward): its memory
    # is then one small constant, and the peak's growth with T is the backbone's
    HFTrainable.logit_chunk_rows = 256
    init_ranks("cpu", timeout_s=600)
    learner = sharded_learner(cfg, policy_config(cfg))
    rng = random.Random(0)
    row = TrainRow(
        [rng.randrange(100, 5000) for _ in range(tokens)], [0.0] * 16 + [1.0] * (tokens - 16)
    )
    learner.train_step(TrainBatch([row], "cross_entropy"))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = rss_kib("VmRSS")
    start = time.perf_counter()
    metrics = learner.train_step(TrainBatch([row], "cross_entropy"))
    seconds = time.perf_counter() - start
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "peak_above_mib": (rss_kib("VmHWM") - before) / 1024,
                "seconds": seconds,
                "loss": metrics["loss"],
            }
        )
    )
    import torch.distributed as dist

    dist.destroy_process_group()


def run(model: Path, tokens: int, size: int) -> dict:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(size),
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "MALLOC_MMAP_THRESHOLD_": str(1 << 20),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            rank_main, (model, tokens, size, Path(tmp)), nprocs=size, start_method="spawn"
        )
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(size)]
    return {
        "tokens": tokens,
        "sequence": size,
        "peak_above_mib_max_rank": max(r["peak_above_mib"] for r in ranks),
        "seconds": max(r["seconds"] for r in ranks),
        "loss": ranks[0]["loss"],
    }


def main() -> None:
    from benchmarks._machine import machine_state

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="2048,8192")
    p.add_argument("--sizes", default="1,2,4")
    p.add_argument("--out", type=Path, default=HERE / "results" / "sequence_parallel.json")
    args = p.parse_args()
    state = machine_state()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        write_model(model)
        for tokens in map(int, args.tokens.split(",")):
            for size in map(int, args.sizes.split(",")):
                rows.append(run(model, tokens, size))
                print(json.dumps(rows[-1]), flush=True)
    args.out.write_text(json.dumps({"machine": state, "shape": SHAPE, "rows": rows}, indent=1))
    print(f"{'tokens':>7} {'S':>2} {'peak MiB/rank':>14} {'seconds':>8}")
    for r in rows:
        print(
            f"{r['tokens']:>7} {r['sequence']:>2} {r['peak_above_mib_max_rank']:>14.0f} "
            f"{r['seconds']:>8.2f}"
        )


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: children stop, temporary folders go
    main()
