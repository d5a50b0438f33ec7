"""Where the trainer/sampler log-prob gap comes from: LoRA vs full fine-tuning, bf16 vs fp32,
merged sampling on/off, the merged copy's linears in fp32 or cast to bf16.

The GPU check (benchmarks/results/gpu_check_h200.json) reported a mean gap of 0.150 nats per
token with LoRA and 0.033 with full fine-tuning. Under `model.dtype: auto` on a GPU those two
runs differ in more than the adapter: LoRA computed in bf16, full fine-tuning in fp32. This
ablation holds the weights fixed (step 0: the adapter as initialised, B = 0, or with a random
B of a given RMS standing in for a trained one) and changes one thing per arm:

    full-fp32            full FT, fp32 learner, the sampler runs the same module
    full-bf16            full FT, bf16 model on both sides (the same module)
    full-fp32/bf16-copy  full FT, fp32 learner, a bf16 sampling copy (today's GPU default)
    lora-fp32-merged     LoRA on fp32 base weights, merged sampling
    lora-bf16-merged     LoRA on bf16 base weights, merged copy with fp32 adapted linears
                         (today's default where bf16 is native)
    lora-bf16-cast       the same, the merged copy's linears cast to bf16
    lora-bf16-unmerged   LoRA on bf16, sampling through the peft model itself

Each arm samples the same prompts (temperature 1, fixed seeds) with the sampler, then scores
the sampled tokens with the learner's `token_logprobs`; the gap per token is
|log pi_learner - log pi_sampler| (what the learner logs as `logprob_gap`): mean, p99, max.

`--random` runs the GPU check's own model instead: a randomly initialised 88M Llama
(scripts/gpu_check.py `build_model`, initializer_range 0.1) with SmolLM2's tokenizer.

    PYTHONPATH=src python benchmarks/lora_gap.py [--model smollm2-135m-instruct | --random]
        [--prompts 16] [--new-tokens 48] [--adapter-rms 0 1e-3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from _machine import machine_state

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.base import SamplingParams
from practicum.engine.hf import HFEngineCopy, load_hf_engine
from practicum.engine.hf_model import PolicyConfig
from practicum.engine.hf_sampler import HFSampler, MergedCopy
from practicum.engine.models import resolve_model

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "lora_gap.json"
QUESTIONS = [
    "Write a Python function that reverses a string.",
    "What is the capital of Australia?",
    "Explain gradient descent in two sentences.",
    "Give three uses of a hash map.",
    "How do I read a CSV file with pandas?",
    "Name a prime number larger than 100.",
    "Summarise the plot of Hamlet in one line.",
    "What does `git rebase` do?",
    "Write a haiku about compilers.",
    "Why is the sky blue?",
    "Fix this code: `for i in range(10) print(i)`",
    "What is 17 times 23?",
    "List the planets in order from the sun.",
    "What is a random forest?",
    "Translate 'good morning' into French.",
    "How does HTTPS keep data private?",
]

ARMS = {  # name: (lora, learner dtype, how the sampler is built)
    "full-fp32": (False, "float32", "shared"),
    "full-bf16": (False, "bfloat16", "shared"),
    "full-fp32/bf16-copy": (False, "float32", "bf16-copy"),
    "lora-fp32-merged": (True, "float32", "shared"),
    "lora-bf16-merged": (True, "bfloat16", "shared"),
    "lora-bf16-cast": (True, "bfloat16", "cast"),
    "lora-bf16-unmerged": (True, "bfloat16", "unmerged"),
}


def perturb_adapter(model: torch.nn.Module, rms: float, seed: int = 1) -> None:
    """Give every LoRA B a random value of RMS `rms` (B = 0 at initialisation makes the adapter
    a no-op, which hides how the two sides apply it)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * rms)


def build(arm: str, model: str, rms: float, device: str = "cpu"):
    """(trainable, sampler) for one arm, holding the same weights."""
    lora, dtype, how = ARMS[arm]
    policy = PolicyConfig(
        model=model, dtype=dtype, lora=lora, device=device, merged_sampling=how != "unmerged"
    )
    trainable, sampler = load_hf_engine(policy)
    if lora and rms:
        perturb_adapter(trainable.model, rms)
    if how == "cast":
        merged = MergedCopy(
            trainable.model,
            resolve_model(model),
            trainable.lm.dtype,
            trainable.device,
            fp32_master=False,
        )
        sampler = HFSampler(
            trainable.lm, trainable.tokenizer, peft_model=trainable.model, merged=merged
        )
    elif how == "bf16-copy":
        sampler = HFEngineCopy(replace(policy, dtype="bfloat16"))
    sampler.load_weights(trainable.export_weights(1))
    return trainable, sampler


def gaps(trainable, sampler, prompts: list[list[int]], new_tokens: int) -> torch.Tensor:
    """|learner - sampler| log-prob of every sampled token."""
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    samples = sampler.generate(prompts, params, seeds=list(range(len(prompts))))
    rows = [p + s.token_ids for p, s in zip(prompts, samples)]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), trainable.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    with torch.no_grad():
        lp = trainable.token_logprobs(ids, mask)
    out = []
    for i, (p, s) in enumerate(zip(prompts, samples)):
        learner = lp[i, len(p) : len(p) + len(s.token_ids)]
        out.append((learner.cpu() - torch.tensor(s.logprobs)).abs())
    return torch.cat(out)


def gpu_check_model(folder: Path) -> str:
    """The GPU check's random model, saved into `folder`."""
    spec = importlib.util.spec_from_file_location(
        "gpu_check", HERE.parent / "scripts" / "gpu_check.py"
    )
    gpu_check = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = gpu_check  # its dataclasses look their module up
    spec.loader.exec_module(gpu_check)
    from practicum.engine.hf_model import load_tokenizer

    tokenizer = load_tokenizer(resolve_model("smollm2-135m-instruct"))
    gpu_check.build_model(folder, tokenizer, gpu_check.FULL)
    return str(folder)


def chat_prompts(tokenizer, n: int) -> list[list[int]]:
    """The first `n` questions as chat prompts (token ids)."""
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in QUESTIONS[:n]
    ]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def arm_rows(
    model: str,
    arms: list[str],
    adapter_rms: list[float],
    n_prompts: int,
    new_tokens: int,
    device: str = "cpu",
    log=print,
) -> list[dict]:
    """One row per (arm, adapter RMS): the gap's mean, p99 and max over the sampled tokens."""
    rows = []
    for rms in adapter_rms:
        for arm in arms:
            if not ARMS[arm][0] and rms != adapter_rms[0]:
                continue  # full FT has no adapter: one row is enough
            t0 = time.perf_counter()
            trainable, sampler = build(arm, model, rms, device)
            g = (
                gaps(trainable, sampler, chat_prompts(trainable.tokenizer, n_prompts), new_tokens)
                .float()
                .cpu()
            )
            row = {
                "arm": arm,
                "adapter_rms": rms if ARMS[arm][0] else None,
                "tokens": g.numel(),
                "gap_mean": g.mean().item(),
                "gap_p99": g.quantile(0.99).item(),
                "gap_max": g.max().item(),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            rows.append(row)
            log(
                f"{arm:22s} rms={row['adapter_rms']!s:6s} tokens={row['tokens']:5d} "
                f"mean={row['gap_mean']:.2e} p99={row['gap_p99']:.2e} max={row['gap_max']:.2e}"
            )
            del trainable, sampler
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--adapter-rms", type=float, nargs="+", default=[0.0, 1e-3])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--device", default="cpu", help="model.device of every arm")
    ap.add_argument(
        "--random", action="store_true", help="the GPU check's random 88M Llama instead of --model"
    )
    args = ap.parse_args()
    machine = machine_state()
    scratch = tempfile.TemporaryDirectory(prefix="lora_gap_")
    model = gpu_check_model(Path(scratch.name)) if args.random else args.model
    torch.manual_seed(0)
    rows = arm_rows(
        model,
        args.arms,
        args.adapter_rms,
        args.prompts,
        args.new_tokens,
        args.device,
        log=lambda line: print(line, flush=True),
    )
    scratch.cleanup()
    machine["load_avg_after"] = __import__("os").getloadavg()[0]
    out = OUT.with_name("lora_gap_random.json") if args.random else OUT
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine,
                "model": "gpu_check random 88M Llama" if args.random else args.model,
                "date": time.strftime("%Y-%m-%d"),
                "settings": vars(args),
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: children stop, temporary folders go
    main()
