"""The cost of grammar-constrained decoding (engine/constraint.py) on the HF engine, and the
log-prob agreement it keeps.

Sampling: SmolLM2 with a LoRA adapter merged into the sampling copy (as in training), chat
prompts, temperature 1, batch 1 and 8, free text against two grammars of the kind the
environments use (a SWE tool call, an AgentFlow planner reply). Rows stop on their own (eos,
or the grammar complete), so the figure compared is seconds per sampled token. The mask work
alone (llguidance's mask for each row, unpacking it and masking the logits, consuming the
token) is timed on the same tokens, and so is the learner's side: replaying the grammar over
the sampled ids and `token_logprobs` (forward + backward) with and without the masks.
Agreement: |behaviour log-prob - learner log-prob| per sampled token, with the replayed masks
(what training uses) and, for contrast, without them.

    python benchmarks/constrained_decoding.py           # ~minutes
    python benchmarks/constrained_decoding.py --quick                          # smoke run
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from _machine import machine_state
from rich.console import Console
from rich.table import Table

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.base import SamplingParams
from practicum.engine.constraint import grammars_for, masked_logits
from practicum.engine.hf import PolicyConfig, load_hf_engine

RESULTS = Path(__file__).parent / "results" / "constrained_decoding.json"

GRAMMARS = {
    "free": None,
    "swe tool call": r"""
start: view | search | edit
view: "view " PATH
search: "search " QUERY
edit: "edit " PATH "\n<<<\n" LINE "\n===\n" LINE "\n>>>"
PATH: /[A-Za-z0-9_.\/-]{1,60}/
QUERY: /[^\n]{1,40}/
LINE: /[^\n]{0,80}/
""",
    "flow planner": r"""
start: "Context: " TEXT "\nSub-Goal: " TEXT "\nTool Name: " TOOL
TEXT: /[^\n]{1,120}/
TOOL: "Wikipedia_Search" | "Web_Search" | "Python_Coder" | "Base_Generator"
""",
}
PROMPTS = {
    "free": "Write a short story about a robot learning to paint.",
    "swe tool call": "Fix the bug in toolz/functoolz.py: curry drops keyword arguments. "
    "Reply with one tool call: view PATH, search TEXT, edit PATH or submit.",
    "flow planner": "Query: Who directed the film that won Best Picture in 1998? Plan the next "
    "step as Context, Sub-Goal and Tool Name.",
}


def prompts_for(tok, name: str, n: int) -> list[list[int]]:
    msgs = [{"role": "user", "content": PROMPTS[name]}]
    ids = tok.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return [list(ids) for _ in range(n)]


def sample(sampler, prompts, grammar, new_tokens, seed) -> tuple[list, float, float]:
    """(samples, wall seconds, CPU seconds of this process: less sensitive to other load)."""
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, grammar=grammar)
    start, cpu = time.perf_counter(), time.process_time()
    out = sampler.generate(prompts, params, seeds=[seed + i for i in range(len(prompts))])
    return out, time.perf_counter() - start, time.process_time() - cpu


def mask_work(tok, vocab: int, grammar: str, samples) -> float:
    """Seconds of the sampler's per-token grammar work over `samples`' tokens: the mask of
    each row, unpacked onto logits of the model's vocabulary, and consuming the token."""
    g = grammars_for(tok)
    logits = torch.zeros(1, vocab)
    packed = torch.empty(1, g.width, dtype=torch.int32)
    start = time.perf_counter()
    for s in samples:
        m = g.matcher(grammar)
        for t in s.token_ids:
            masked_logits(logits, g.fill([m], packed))
            g.consume(m, t, grammar)
    return time.perf_counter() - start


def learner_side(trainable, prompts, samples, grammar) -> dict:
    """Replay seconds, token_logprobs (forward + backward) seconds with and without the masks,
    and the behaviour/learner log-prob gaps with and without them."""
    g = grammars_for(trainable.tokenizer)
    g.replay.cache_clear()
    rows = [p + s.token_ids for p, s in zip(prompts, samples)]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    score = torch.zeros(len(rows), width)
    for i, (p, r) in enumerate(zip(prompts, rows)):
        ids[i, : len(r)], mask[i, : len(r)], score[i, len(p) : len(r)] = torch.tensor(r), 1, 1
    allowed = None
    replay_s = 0.0
    if grammar is not None:
        start = time.perf_counter()
        allowed = torch.full((len(rows), width, g.width), -1, dtype=torch.int32)
        for i, (p, s) in enumerate(zip(prompts, samples)):
            allowed[i, len(p) : len(rows[i])] = g.replay(grammar, tuple(s.token_ids))
        replay_s = time.perf_counter() - start

    def step(masks) -> tuple[float, torch.Tensor]:
        trainable.model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        lp = trainable.token_logprobs(ids, mask, score_mask=score, allowed=masks)
        (-(lp * score.to(lp.device)).sum()).backward()
        return time.perf_counter() - start, lp.detach().cpu()

    step(allowed)  # warm-up
    seconds, lp = step(allowed)
    behaviour = torch.zeros_like(lp)
    for i, (p, s) in enumerate(zip(prompts, samples)):
        behaviour[i, len(p) : len(rows[i])] = torch.tensor(s.logprobs)
    gap = (lp - behaviour).abs()[score.bool()]
    out = {
        "replay_s": replay_s,
        "learner_s": seconds,
        "gap_max": gap.max().item(),
        "gap_mean": gap.mean().item(),
    }
    if grammar is not None:
        out["learner_s_unmasked"], lp_free = step(None)
        free_gap = (lp_free - behaviour).abs()[score.bool()]
        out["gap_max_unmasked"] = free_gap.max().item()
        out["gap_mean_unmasked"] = free_gap.mean().item()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu", help="model.device (cpu, cuda, ...)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="generate calls per cell (best kept)")
    ap.add_argument("--quick", action="store_true", help="batch 2, 24 new tokens, one repeat")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.batches, args.new_tokens, args.repeats = [2], 24, 1

    state = machine_state()
    trainable, sampler = load_hf_engine(
        PolicyConfig(model=args.model, dtype=args.dtype, device=args.device)
    )
    torch.manual_seed(0)
    for p in trainable.trainable_parameters():  # a trained-looking adapter, merged for sampling
        torch.nn.init.normal_(p, std=0.01)
    sampler.load_weights(trainable.export_weights(1))
    tok = trainable.tokenizer
    vocab = trainable.lm.get_output_embeddings().weight.shape[0]
    for name, grammar in GRAMMARS.items():  # warm-up: compile, first matcher, first forward
        sample(sampler, prompts_for(tok, name, 1), grammar, 4, 0)
        if grammar is not None:
            grammars_for(tok).matcher(grammar)

    rows = []
    for batch in args.batches:
        sample(sampler, prompts_for(tok, "free", batch), None, 8, 0)  # first call at this batch
        for name, grammar in GRAMMARS.items():
            prompts = prompts_for(tok, name, batch)
            best = None
            for r in range(args.repeats):
                out, seconds, cpu = sample(sampler, prompts, grammar, args.new_tokens, 100 * r)
                tokens = sum(len(s.token_ids) for s in out)
                if best is None or seconds / tokens < best[1] / best[3]:
                    best = (out, seconds, cpu, tokens)
            out, seconds, cpu, tokens = best
            row = {
                "batch": batch,
                "grammar": name,
                "tokens": tokens,
                "seconds": seconds,
                "ms_per_token": 1000 * seconds / tokens,
                "cpu_ms_per_token": 1000 * cpu / tokens,
                "stopped": sum(s.finish_reason == "stop" for s in out) / len(out),
            }
            if grammar is not None:
                row["mask_ms_per_token"] = 1000 * mask_work(tok, vocab, grammar, out) / tokens
                row["forced_share"] = sum(lp == 0.0 for s in out for lp in s.logprobs) / tokens
            row.update(learner_side(trainable, prompts, out, grammar))
            row["replay_ms_per_token"] = 1000 * row["replay_s"] / tokens
            rows.append(row)
            print(json.dumps(row))
    for row in rows:
        free = next(r for r in rows if r["batch"] == row["batch"] and r["grammar"] == "free")
        row["vs_free"] = row["ms_per_token"] / free["ms_per_token"]
        row["cpu_vs_free"] = row["cpu_ms_per_token"] / free["cpu_ms_per_token"]

    table = Table(
        title=f"Constrained decoding, HF sampler, {args.model} {args.dtype} (LoRA merged), T=1"
    )
    for col in (
        "batch",
        "grammar",
        "tokens",
        "ms/token",
        "vs free",
        "CPU ms/token",
        "CPU vs free",
        "mask ms/token",
        "forced",
        "replay ms/token",
        "learner s (masked / free)",
        "gap max (masked)",
        "gap max (unmasked)",
    ):
        table.add_column(col)
    for r in rows:
        constrained = r["grammar"] != "free"
        table.add_row(
            str(r["batch"]),
            r["grammar"],
            str(r["tokens"]),
            f"{r['ms_per_token']:.1f}",
            f"{r['vs_free']:.2f}x",
            f"{r['cpu_ms_per_token']:.1f}",
            f"{r['cpu_vs_free']:.2f}x",
            f"{r['mask_ms_per_token']:.2f}" if constrained else "-",
            f"{r['forced_share']:.0%}" if constrained else "-",
            f"{r['replay_ms_per_token']:.2f}" if constrained else "-",
            f"{r['learner_s']:.2f} / {r['learner_s_unmasked']:.2f}"
            if constrained
            else f"{r['learner_s']:.2f}",
            f"{r['gap_max']:.1e}",
            f"{r['gap_max_unmasked']:.2f}" if constrained else "-",
        )
    Console(width=200).print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "machine": {
                    **state,
                    "python": platform.python_version(),
                    "torch": torch.__version__,
                    "busy_after": machine_state(busy_limit=1.1)["busy_before"],
                },
                "model": args.model,
                "dtype": args.dtype,
                "device": args.device,
                "new_tokens": args.new_tokens,
                "grammars": GRAMMARS,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
