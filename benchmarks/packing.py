"""What packing costs a GRPO group its shared-prompt pass: learner forward + backward seconds and
positions computed, padded micro-batches (the group's prompt once, `HFTrainable._hidden`, the
replies padded to the longest) against one packed micro-batch (every row whole, no padding).

One group of G rows sharing a prompt of P tokens, replies of different lengths; SmolLM2-135M,
LoRA, fp32, on the CPU. Two shapes: long replies of spread lengths (agent trajectories: the
prompt a small part of each row) and short replies (a question-answer group: the prompt most of
each row). Positions computed: padded = P + G x longest reply; packed = sum of row lengths. Peak
memory too: padded rows take sdpa's masked (math) kernel on the CPU, which keeps a [B, heads, T,
T] attention matrix per layer for backward; each packed row runs causal, mask-free.

    python benchmarks/packing.py
"""

from __future__ import annotations

import json
import random
import resource
import time
from pathlib import Path

from _machine import machine_state

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.factory import load_trainable
from practicum.engine.hf_model import PolicyConfig
from practicum.learner.rows import TrainRow, token_batch

RESULTS = Path(__file__).parent / "results" / "packing.json"
SHAPES = {"long replies": (128, [64, 160, 256, 384]), "short replies": (128, [8, 12, 16, 24])}


def group(prompt: int, replies: list[int], seed: int = 0) -> list[TrainRow]:
    rng = random.Random(seed)
    p = [rng.randrange(100, 40000) for _ in range(prompt)]
    return [
        TrainRow(p + [rng.randrange(100, 40000) for _ in range(n)], [0.0] * prompt + [1.0] * n)
        for n in replies
    ]


def seconds(trainable, rows: list[TrainRow], packed: bool, repeats: int = 2) -> float:
    tb = token_batch(rows, trainable.pad_id)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        logp = trainable.token_logprobs(
            tb.input_ids, tb.attention_mask, score_mask=tb.loss_mask, packed=packed
        )
        (logp * tb.loss_mask).sum().backward()
        best = min(best, time.perf_counter() - start)
    return best


def peak_rss_gb() -> float:
    """This process's peak resident memory so far (it only grows: packed runs first)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    machine = machine_state()
    trainable = load_trainable(PolicyConfig(dtype="float32", device="cpu"))
    out = []
    for name, (prompt, replies) in SHAPES.items():
        rows = group(prompt, replies)
        packed, packed_rss = seconds(trainable, rows, True), peak_rss_gb()
        padded, padded_rss = seconds(trainable, rows, False), peak_rss_gb()
        r = {
            "shape": name,
            "prompt": prompt,
            "replies": replies,
            "positions_shared_prompt": prompt + len(replies) * max(replies),
            "positions_packed": sum(len(r.input_ids) for r in rows),
            "seconds_shared_prompt": padded,
            "seconds_packed": packed,
            "peak_rss_gb_after_packed": packed_rss,
            "peak_rss_gb_after_shared_prompt": padded_rss,
        }
        out.append(r)
        print(
            f"{name:14s} P={prompt} replies={replies}: shared-prompt pass "
            f"{r['positions_shared_prompt']} positions {padded:.2f} s | packed "
            f"{r['positions_packed']} positions {packed:.2f} s; peak RSS {packed_rss:.2f} GB "
            f"after packed, {padded_rss:.2f} GB after padded"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine, "rows": out}, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: children stop, temporary folders go
    main()
