"""Memory of the grammar masks the learner replays for constrained turns, per 1k tokens of a long
row: the dense [B, T, W] int32 replay the learner used to build, against `GrammarMasks` (only the
constrained positions, each distinct mask once), which it builds now. Exactness is checked on
the shortest row (the sparse masks expand to the dense ones bit for bit).

Rows are SWE-like agent trajectories on the SmolLM2 tokenizer (W = 1536 words of 32 bits):
observations of `--observation` unconstrained tokens, each followed by a tool call sampled under
the SWE tool-call grammar (constrained, ~20-60 tokens); and a worst case where every token of
the row is constrained (one long turn under a free-text grammar). For a 152k vocabulary (W =
4750) both figures scale by 4750 / 1536 (the table's rows are W words too).

    python benchmarks/grammar_masks.py            # rows of 8k, 32k and 131k tokens
    python benchmarks/grammar_masks.py --quick    # 8k only

`mask_memory(tokens, observation)` returns one row's figures (for benchmarks/long_context.py).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from _machine import machine_state
from constrained_decoding import GRAMMARS

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.constraint import grammars_for
from practicum.engine.models import load_builtin_tokenizer
from practicum.learner.rows import TrainRow, allowed_masks

RESULTS = Path(__file__).parent / "results" / "grammar_masks.json"

TOOL = GRAMMARS["swe tool call"]  # the SWE tool-call grammar constrained_decoding.py times
FREE = r"""
start: LINE ("\n" LINE)*
LINE: /[^\n]{0,200}/
"""
CALLS = [
    "view src/toolz/functoolz.py",
    "search def curry",
    "view tests/test_functoolz.py",
    "edit src/toolz/functoolz.py\n<<<\n        return self.func(*args, **kwargs)\n===\n"
    "        return self.func(*args, **{**self.keywords, **kwargs})\n>>>",
    "search keywords=",
    "view src/toolz/__init__.py",
]


def trajectory(tokenizer, tokens: int, observation: int, seed: int = 0) -> TrainRow:
    """A row of about `tokens` ids: observation (random ids, unconstrained), tool call
    (constrained, ending with eos), repeated; `observation` 0: one constrained turn."""
    rng = random.Random(seed)
    eos = tokenizer.eos_token_id
    ids, spans = [], []
    if observation == 0:
        words = "the curry function drops keyword arguments when called twice".split()
        lines = [" ".join(rng.choice(words) for _ in range(15)) for _ in range(tokens // 10)]
        # ~16 tokens a line; any cut is a prefix the grammar accepts
        call = tokenizer("\n".join(lines)).input_ids[: tokens - 1] + [eos]
        return TrainRow(call, [1.0] * len(call), constrained=[(0, len(call), FREE)])
    while len(ids) < tokens:
        ids += [rng.randrange(100, 40000) for _ in range(observation)]
        call = tokenizer(rng.choice(CALLS)).input_ids + [eos]
        spans.append((len(ids), len(ids) + len(call), TOOL))
        ids += call
    return TrainRow(ids, [1.0] * len(ids), constrained=spans)


def mask_memory(tokens: int, observation: int = 600, check: bool = False) -> dict:
    """One row's grammar-mask bytes, dense and sparse, per 1k tokens, and the seconds to build
    the sparse ones (replay included)."""
    tokenizer = load_builtin_tokenizer()
    grammars = grammars_for(tokenizer)
    row = trajectory(tokenizer, tokens, observation)
    t = len(row.input_ids)
    start = time.perf_counter()
    sparse = allowed_masks([row], t, tokenizer)
    seconds = time.perf_counter() - start
    dense_bytes = t * grammars.width * 4
    constrained = sum(b - a for a, b, _ in row.constrained)
    if check:
        dense = torch.full((1, t, grammars.width), -1, dtype=torch.int32)
        for a, b, g in row.constrained:
            dense[0, a:b] = grammars.replay(g, tuple(row.input_ids[a:b]))
        assert torch.equal(sparse.dense(), dense), "sparse masks differ from the dense replay"
    return {
        "tokens": t,
        "constrained_tokens": constrained,
        "distinct_masks": len(sparse.table),
        "words": grammars.width,
        "dense_mb_per_1k": dense_bytes / t * 1000 / 2**20,
        "sparse_mb_per_1k": sparse.nbytes / t * 1000 / 2**20,
        "dense_mb": dense_bytes / 2**20,
        "sparse_mb": sparse.nbytes / 2**20,
        "build_seconds": seconds,
        "exact": check or None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--observation", type=int, default=600, help="unconstrained tokens between tool calls"
    )
    args = parser.parse_args()
    lengths = [8192] if args.quick else [8192, 32768, 131072]
    machine = machine_state()
    rows = []
    for kind, observation in (("tool calls", args.observation), ("all constrained", 0)):
        for n in lengths:
            r = {"row": kind, **mask_memory(n, observation, check=n == lengths[0])}
            rows.append(r)
            print(
                f"{kind:16s} T={r['tokens']:6d} constrained={r['constrained_tokens']:6d} "
                f"distinct={r['distinct_masks']:4d}  dense {r['dense_mb_per_1k']:.2f} MB/1k "
                f"-> sparse {r['sparse_mb_per_1k']:.4f} MB/1k  (whole row {r['dense_mb']:.0f}"
                f" -> {r['sparse_mb']:.2f} MB; built in {r['build_seconds']:.1f} s)"
            )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: children stop, temporary folders go
    main()
