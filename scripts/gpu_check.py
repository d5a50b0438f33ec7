"""The GPU check (issue 21): practicum's real training entry on one device, in bf16, sync and
async, LoRA and full fine-tuning, on a randomly initialised Llama (no weights to download).

    scripts/gpu_check.sh [--device cuda] [--quick] [--out FILE] [--set KEY=VALUE ...]

Builds the model into a temporary folder, trains the `toy` task (it needs nothing beyond
practicum's core: the calculator imports reasoning-gym, whose generators cannot travel to the
lent GPU machine) with `load_config` + `run_training`, four runs:

    sync-lora  sync-full  async-lora  async-full

and reads back what each run wrote (metrics.jsonl, summary.json, episodes.jsonl):

- steps completed (summary.json) against the steps asked for;
- trainer/sampler log-prob gap: the learner's `logprob_gap` (mean |log pi_learner - log
  pi_sampler| per trained token, before each step's update) and `logprob_gap_max`;
- peak GPU memory of the run (torch.cuda.max_memory_allocated, reset before each run);
- learner tokens/s: sum(train_tokens * updates) / sum(learner_seconds) over the steps;
- sampling tokens/s: tokens sampled into training episodes / seconds spent sampling them
  (sync: the steps' rollout_seconds, in which the learner waits; async: the generation
  server's busy seconds from summary.json, else the run's wall time).

Then the learner alone, sharded with FSDP2 (`practicum.learner.sharded`, as `placement.ranks`
runs it) as a one-rank group on this device, LoRA and full fine-tuning, fp32 master weights
with bf16 compute on a GPU, against the unsharded learner on the same synthetic batches at the
same precision (its fp32 weights under bf16 autocast on a GPU): peak memory, learner tokens/s
and the largest weight difference between the two (runs fsdp2-lora and fsdp2-full).

Runs colocation-full and colocation-lora: 50 cycles of sampling, sleep, a learner step and
the ordered wake with its publish (`practicum.engine.vllm_sleep.GPUHandover`, sleep level 2
for full weights, 1 for LoRA) with an HF copy standing in for vLLM on the same device:
allocated and reserved GPU memory after each phase, no out-of-memory, no growth of reserved
memory across cycles, the woken copy equal to the learner.

Run long-context: the learner alone on one row of 16k, 32k and 64k tokens (the check's model
shape with 64k positions, full fine-tuning, checkpointing as resolved for the device): peak
allocated memory and tokens/s per length, the first failing length recorded.

Run lora-gap: benchmarks/lora_gap.py's arms on the check's model and device (full FT and LoRA,
fp32 and bf16, merged sampling on and off, the adapter as initialised and perturbed), each
arm's trainer/sampler gap mean, p99 and max per token.

With `--ranks N` (N > 1, a node with N GPUs), the sharded learner again, now over N processes
of this node, one device each (rank r on cuda:r, NCCL; gloo on the CPU), LoRA and full
fine-tuning (runs ranks-lora and ranks-full), against the unsharded learner: per rank the bytes
its collectives sent (`sent_bytes`: ring accounting, as nccl-tests count bus bandwidth: an
all-gather sends (n - 1) x its input, a reduce-scatter (n - 1) / n of its input, an all-reduce
2 (n - 1) / n of its tensor, a broadcast its tensor; a scatter's source n - 1 pieces, a
gather's other ranks their piece), its peak allocated and
reserved GPU memory, and the largest weight difference from the one process. This is how a user
checks a multi-GPU node; it has run on the CPU only (tests/scripts/test_gpu_check.py), never on
GPUs.

Then the weight group of `engine.weight_sync: broadcast` (`practicum.engine.weight_group`) as
a group of one on this device (NCCL for CUDA tensors, gloo on the CPU): it forms, and sends the
check model's full weights in buckets (run weight-group). A group of one moves no bytes: NCCL
joins no two processes on one GPU, so the transfer itself needs a machine with two GPUs; this
catches what a single GPU can (the backend's construction, bucketing CUDA tensors).

If a reference chat model resolves offline (default: SmolLM2-135M-Instruct) it also trains it
a few sync LoRA steps and records the held-out reward before and after. Everything goes into
one JSON, rewritten after every run so a killed check still leaves what it had; the exit
status is 1 when any run crashed, stopped short, logged a non-finite value or a gap above
--max-gap. Only public entry points are used, so the check survives refactors of the runtime.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import json
import math
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRIED_TOKENIZER = ROOT / ".whl" / "tokenizer"
"""Where scripts/gpu_wheels.sh saves the SmolLM2 tokenizer, so the GPU machine needs no GGUF."""

FINITE_KEYS = ("loss", "grad_norm", "entropy", "approx_kl", "logprob_gap", "logprob_gap_max")
"""Per-step metrics that must be finite in every logged step."""

RUNS = (
    ("sync-lora", "sync", True),
    ("sync-full", "sync", False),
    ("async-lora", "async", True),
    ("async-full", "async", False),
)
FSDP2_RUNS = (("fsdp2-lora", True), ("fsdp2-full", False))
"""The sharded learner alone (`fsdp2_check`), selectable in --runs like the runs above."""
WEIGHT_GROUP_RUN = "weight-group"
"""The broadcast weight group alone (`weight_group_check`), selectable in --runs too."""
COLOCATION_RUNS = (("colocation-full", False), ("colocation-lora", True))
"""Sleep / train / wake cycles in the colocated order (`colocation_check`)."""
LONG_CONTEXT_RUN = "long-context"
"""One long row through the learner at growing lengths (`long_context_check`)."""
LORA_GAP_RUN = "lora-gap"
"""Where the trainer/sampler gap comes from, arm by arm (`lora_gap_check`)."""
RANKS_RUNS = (("ranks-lora", True), ("ranks-full", False))
"""The sharded learner over --ranks processes (`ranks_check`), run when --ranks > 1."""


@dataclass(frozen=True)
class Size:
    """Model and batch sizes of one check."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    steps: int
    group_size: int
    tasks_per_step: int
    max_new_tokens: int
    eval_size: int
    micro_batch_size: int


FULL = Size(
    hidden=768,
    intermediate=2048,
    layers=8,
    heads=12,
    kv_heads=4,
    steps=6,
    group_size=8,
    tasks_per_step=4,
    max_new_tokens=64,
    eval_size=16,
    micro_batch_size=16,
)
QUICK = Size(
    hidden=64,
    intermediate=128,
    layers=2,
    heads=4,
    kv_heads=2,
    steps=2,
    group_size=4,
    tasks_per_step=2,
    max_new_tokens=8,
    eval_size=2,
    micro_batch_size=4,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cuda", help="model.device of every run (cuda, cpu, ...)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--quick", action="store_true", help="tiny model and batches (CPU tests)")
    p.add_argument("--out", type=Path, required=True, help="the JSON to write")
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="a folder holding a tokenizer (default: .whl/tokenizer if present, "
        "else practicum's built-in SmolLM2 tokenizer)",
    )
    p.add_argument(
        "--reference-model",
        default="smollm2-135m-instruct",
        help="a real model to train a few steps if it resolves offline; 'none' skips",
    )
    p.add_argument(
        "--reference-steps",
        type=int,
        default=None,
        help="its training steps (default: the runs' steps)",
    )
    p.add_argument(
        "--max-gap",
        type=float,
        default=0.2,
        help="largest acceptable mean trainer/sampler log-prob gap of a run",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra config override for every run (repeatable)",
    )
    p.add_argument(
        "--ranks",
        type=int,
        default=1,
        help="above 1: also train the sharded learner over this many processes of "
        "this node, one device each (runs ranks-lora, ranks-full)",
    )
    names = (
        [name for name, _, _ in RUNS]
        + [name for name, _ in FSDP2_RUNS]
        + [name for name, _ in RANKS_RUNS]
        + [WEIGHT_GROUP_RUN, LORA_GAP_RUN, LONG_CONTEXT_RUN]
        + [name for name, _ in COLOCATION_RUNS]
    )
    p.add_argument(
        "--runs", default=",".join(names), help="comma-separated subset of " + ", ".join(names)
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="dump every thread's stack and exit 1 after this many seconds (a hang)",
    )
    args = p.parse_args(argv)
    unknown = set(args.runs.split(",")) - set(names)
    if unknown:
        p.error(f"unknown --runs {', '.join(sorted(unknown))}")
    return args


# -- the model ----------------------------------------------------------------------------------
def load_tokenizer(folder: Path | None):
    """The tokenizer to build the model around: a given folder, the carried one, or the
    built-in SmolLM2 tokenizer (which reads the GGUF package)."""
    from transformers import AutoTokenizer

    folder = folder or (
        CARRIED_TOKENIZER if (CARRIED_TOKENIZER / "tokenizer.json").is_file() else None
    )
    if folder is not None:
        return AutoTokenizer.from_pretrained(folder)
    from practicum.engine.models import load_builtin_tokenizer

    return load_builtin_tokenizer()


def build_model(folder: Path, tokenizer, size: Size, seed: int = 0, positions: int = 2048) -> dict:
    """Save a randomly initialised Llama (fp32 on disk, `positions` of context) and the
    tokenizer into `folder`; returns its shape and parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        initializer_range=0.1,  # spread-out logits: samples are not uniform noise
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "hidden": size.hidden,
        "layers": size.layers,
        "vocab": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


# -- one run ------------------------------------------------------------------------------------
def overrides(
    args, size: Size, model: str, out_dir: Path, name: str, mode: str, lora: bool, steps: int
) -> list[str]:
    """Dotted config overrides of one run. A random model rarely ends a reply, so every reply
    is cut by max_new_tokens: overlong masking is off, and so is dynamic sampling (every batch
    trains, so `steps` steps take `steps` batches). Async runs keep a whole batch in flight,
    so the sampler batches as many rows as sync does."""
    return [
        f"model.model={model}",
        f"model.device={args.device}",
        f"model.dtype={args.dtype}",
        f"model.lora={str(lora).lower()}",
        f"runtime.mode={mode}",
        "task.name=toy",
        "task.options.train_size=64",
        f"task.options.eval_size={size.eval_size}",
        f"eval.size={size.eval_size}",
        "eval.every=0",
        "rollout.max_turns=1",
        f"rollout.group_size={size.group_size}",
        f"rollout.tasks_per_step={size.tasks_per_step}",
        f"runtime.num_actors={size.group_size * size.tasks_per_step}",
        f"sampling.max_new_tokens={size.max_new_tokens}",
        f"train.micro_batch_size={size.micro_batch_size}",
        "train.warmup_steps=0",
        f"train.steps={steps}",
        "algo.mask_overlong=false",
        "algo.dynamic_sampling=false",
        f"run.out_dir={out_dir}",
        f"run.name={name}",
        "run.resume=false",
        *args.set,
    ]


def train_run(over: list[str]) -> dict:
    """practicum's own training entry on these overrides; returns summary.json's content."""
    from practicum.config import load_config
    from practicum.runtime.train import run_training

    return run_training(load_config(None, over), progress=False)


def read_rows(run_dir: Path) -> list[dict]:
    """The training steps' rows of metrics.jsonl (evaluation rows hold no loss)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "loss" in r]


def sampled_tokens(run_dir: Path) -> int:
    """Tokens sampled into the run's stored training episodes."""
    path = run_dir / "episodes.jsonl"
    if not path.exists():
        return 0
    return sum(
        len(turn["sampled_ids"])
        for line in path.read_text().splitlines()
        if line.strip()
        for turn in json.loads(line)["turns"]
    )


def run_figures(run_dir: Path, summary: dict, mode: str) -> dict:
    """What one finished run measured (module docstring)."""
    rows = read_rows(run_dir)
    gaps = [r["logprob_gap"] for r in rows if "logprob_gap" in r]
    learner_s = sum(r.get("learner_seconds", 0.0) for r in rows)
    learned = sum(r.get("train_tokens", 0.0) * r.get("updates", 1.0) for r in rows)
    tokens = sampled_tokens(run_dir)
    if mode == "sync":
        sampling_s = sum(r.get("rollout_seconds", 0.0) for r in rows)
    else:
        sampling_s = (summary.get("async") or {}).get("generation_seconds") or summary.get(
            "wall_seconds", 0.0
        )
    reward = lambda ev: ev.get("reward_mean") if ev else None  # noqa: E731
    return {
        "steps": summary.get("steps", len(rows)),
        "logprob_gap": sum(gaps) / len(gaps) if gaps else None,
        "logprob_gap_max": max(
            (r["logprob_gap_max"] for r in rows if "logprob_gap_max" in r), default=None
        ),
        "sampled_tokens": tokens,
        "sampling_seconds": sampling_s,
        "sampling_tokens_per_s": tokens / sampling_s if sampling_s else None,
        "learner_tokens_per_s": learned / learner_s if learner_s else None,
        "reward_before": reward(summary.get("eval_before")),
        "reward_after": reward(summary.get("eval_after")),
        "nonfinite": sorted(
            {
                k
                for r in rows
                for k in FINITE_KEYS
                if isinstance(r.get(k), float) and not math.isfinite(r[k])
            }
        ),
    }


def problems(record: dict, max_gap: float) -> list[str]:
    """Why a run's record fails the check (empty: it passes)."""
    if record.get("error"):
        return [f"{record['name']}: crashed: {record['error']}"]
    out = []
    if record["steps"] < record["steps_wanted"]:
        out.append(
            f"{record['name']}: completed {record['steps']} of {record['steps_wanted']} steps"
        )
    if record["nonfinite"]:
        out.append(f"{record['name']}: non-finite {', '.join(record['nonfinite'])}")
    gap = record["logprob_gap"]
    if gap is None or not math.isfinite(gap) or gap > max_gap:
        out.append(f"{record['name']}: log-prob gap {gap} (bound {max_gap})")
    return out


def ranks_problems(record: dict) -> list[str]:
    """Why a --ranks run fails the check (empty: it passes)."""
    if record.get("error"):
        return [f"{record['name']}: crashed: {record['error']}"]
    if record["steps"] < record["steps_wanted"]:
        return [f"{record['name']}: completed {record['steps']} of {record['steps_wanted']} steps"]
    if record["world"] > 1 and not all(r["sent_bytes"] > 0 for r in record["per_rank"]):
        return [f"{record['name']}: a rank sent no bytes to the others"]
    return []


def memory_reset(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def memory_figures(device: str) -> dict:
    """Peak memory of the run just finished, and what stays allocated once it is dropped."""
    if not device.startswith("cuda"):
        return {"peak_gpu_memory_gb": None, "gpu_memory_left_gb": None}
    import torch

    peak = torch.cuda.max_memory_allocated() / 2**30
    gc.collect()
    torch.cuda.empty_cache()
    return {"peak_gpu_memory_gb": peak, "gpu_memory_left_gb": torch.cuda.memory_allocated() / 2**30}


def run_one(
    args, size: Size, model: str, work: Path, name: str, mode: str, lora: bool, steps: int
) -> dict:
    """Train one run and return its record; an exception is recorded, not raised."""
    record = {
        "name": name,
        "model": model,
        "mode": mode,
        "lora": lora,
        "steps_wanted": steps,
        "error": None,
    }
    memory_reset(args.device)
    started = time.perf_counter()
    try:
        summary = train_run(overrides(args, size, model, work, name, mode, lora, steps))
        record.update(run_figures(work / name, summary, mode))
    except Exception as err:  # the check reports every run, then fails
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    record["wall_seconds"] = time.perf_counter() - started
    record.update(memory_figures(args.device))
    return record


def synthetic_batch(seed: int, size: Size, vocab: int) -> list:
    """size.group_size x size.tasks_per_step episodes of random tokens (rewards 0 / 1 in each
    group, a 16-token prompt, replies of max_new_tokens)."""
    import random

    from practicum.episode import Episode, Turn

    rng = random.Random(seed)
    out = []
    for g in range(size.tasks_per_step):
        prompt = [rng.randrange(vocab) for _ in range(16)]
        for k in range(size.group_size):
            n = size.max_new_tokens
            turn = Turn(
                [rng.randrange(vocab) for _ in range(n)],
                [-rng.uniform(0.5, 6.0) for _ in range(n)],
                0,
            )
            out.append(Episode(f"t{g}", f"{seed}-{g}", prompt, [turn], reward=float(k % 2)))
    return out


def fsdp2_check(args, size: Size, model: str, work: Path, lora: bool) -> dict:
    """The unsharded learner, then the FSDP2-sharded one (a one-rank process group here), each
    `size.steps` PPO steps on the same synthetic batches (KL on, 2 mini-batches): peak memory,
    learner tokens/s, and the largest difference between their final weights."""
    import os

    import torch
    import torch.distributed as dist

    from practicum.batch import rl_batch_of
    from practicum.config import load_config
    from practicum.engine.factory import load_trainable
    from practicum.learner import Learner
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    name = f"fsdp2-{'lora' if lora else 'full'}"
    over = [
        o
        for o in overrides(args, size, model, work, name, "sync", lora, size.steps)
        if not o.startswith("model.dtype=")
    ]
    record = {"name": name, "lora": lora, "steps_wanted": size.steps, "error": None}
    weights = {}
    try:
        cfg = load_config(
            None, [*over, "model.dtype=float32", "algo.kl_coef=0.05", "train.mini_batches=2"]
        )
        import socket

        with socket.socket() as sock:  # a free port for the one-rank group
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
        for kind in ("plain", "fsdp2"):
            memory_reset(args.device)
            if kind == "plain":
                learner = Learner(load_trainable(policy_config(cfg)), cfg)
            else:
                init_ranks(torch.device(args.device).type, timeout_s=300)
                learner = sharded_learner(cfg, policy_config(cfg))
            vocab = len(learner.model.tokenizer)
            seconds = tokens = 0.0
            # the same precision on both sides: FSDP2 computes in bf16 over fp32 masters on a
            # GPU, so the plain learner's fp32 weights compute under bf16 autocast there
            same_precision = (
                torch.autocast("cuda", dtype=torch.bfloat16)
                if kind == "plain" and torch.device(args.device).type == "cuda"
                else contextlib.nullcontext()
            )
            record["compute"] = (
                "bf16 over fp32 weights" if args.device.startswith("cuda") else "fp32"
            )
            for step in range(size.steps):
                with same_precision:
                    m = learner.train_step(rl_batch_of(synthetic_batch(step, size, vocab), cfg))
                seconds += m["learner_seconds"]
                tokens += m["train_tokens"] * m["updates"]
            weights[kind] = {
                k: v.float().cpu() for k, v in learner.export_weights(learner.step).tensors.items()
            }
            record[f"{kind}_learner_tokens_per_s"] = tokens / seconds
            record[f"{kind}_peak_gpu_memory_gb"] = memory_figures(args.device)["peak_gpu_memory_gb"]
            record["steps"] = learner.step
            del learner
        record["max_abs_weight_diff"] = max(
            (weights["plain"][k] - weights["fsdp2"][k]).abs().max().item() for k in weights["plain"]
        )
    except Exception as err:  # reported with the rest
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return record


# -- the sharded learner over several processes (--ranks) ---------------------------------------
def sent_bytes(op: str, tensor_bytes: int, n: int, root: bool) -> float:
    """Bytes one rank sends in collective `op` over `n` ranks, by ring accounting (module doc);
    `tensor_bytes`: its input (all-gather, reduce-scatter), its piece (scatter, gather) or its
    tensor; `root`: it is the scatter's source or the gather's destination."""
    if n <= 1:
        return 0.0
    if op in ("all_gather_single", "all_gather_into_tensor"):
        return float(tensor_bytes * (n - 1))
    if op in ("reduce_scatter_single", "reduce_scatter_tensor"):
        return tensor_bytes * (n - 1) / n
    if op == "all_reduce":
        return 2 * tensor_bytes * (n - 1) / n
    if op == "scatter":
        return float(tensor_bytes * (n - 1)) if root else 0.0
    if op == "gather":
        return 0.0 if root else float(tensor_bytes)
    return float(tensor_bytes)  # broadcast


COUNTED = {
    "all_gather_single": "input_tensor",
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter_single": "input",
    "reduce_scatter_tensor": "input",
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "scatter": "tensor",
    "gather": "tensor",
}
"""torch.distributed collectives whose bytes `count_collectives` adds up, with the argument
it measures."""


def count_collectives(totals: dict[str, float]) -> None:
    """Wrap this process's torch.distributed collectives so that each adds the bytes it sends
    (`sent_bytes`) to totals[op]; FSDP2 and practicum's own transfers call them as attributes
    of the module, so the wrappers see every call."""
    import inspect

    import torch.distributed as dist

    def wrapped(op: str, real, measured: str):
        signature = inspect.signature(real)

        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            tensor, group = bound.get(measured), bound.get("group")
            if tensor is not None:
                me = dist.get_rank(group)  # this rank's number in `group`
                root = bound.get("group_src", bound.get("group_dst"))
                if root is None:  # given as a global rank
                    glob = bound.get("src", bound.get("dst"))
                    root = (
                        None
                        if glob is None
                        else dist.get_group_rank(group or dist.group.WORLD, glob)
                    )
                totals[op] = totals.get(op, 0.0) + sent_bytes(
                    op, tensor.nbytes, dist.get_world_size(group), root == me
                )
            return real(*args, **kwargs)

        return call

    for op, measured in COUNTED.items():
        real = getattr(dist, op, None)
        if real is not None:
            setattr(dist, op, wrapped(op, real, measured))


def ranks_rank(rank: int, cfg, steps: int, size: Size, vocab: int, device: str, out: Path) -> None:
    """One rank of `ranks_check` (a spawned process): the sharded learner on this rank's device
    trains `steps` PPO steps on the synthetic batches; writes out/rank<r>.json (and rank 0 the
    weights, out/weights.pt)."""
    import os

    import torch
    import torch.distributed as dist

    from practicum.batch import rl_batch_of
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    totals: dict[str, float] = {}
    count_collectives(totals)
    kind = torch.device(device).type
    record = {"rank": rank, "error": None}
    try:
        init_ranks(kind, timeout_s=300)
        learner = sharded_learner(cfg, policy_config(cfg))
        record["device"] = str(learner.model.device)
        if kind == "cuda":
            torch.cuda.reset_peak_memory_stats()
        started, tokens = time.perf_counter(), 0.0
        for step in range(steps):
            m = learner.train_step(rl_batch_of(synthetic_batch(step, size, vocab), cfg))
            tokens += m["train_tokens"] * m["updates"]
        seconds = time.perf_counter() - started
        update = learner.export_weights(learner.step)
        record.update(
            steps=learner.step,
            seconds=seconds,
            learner_tokens_per_s=tokens / seconds,
            sent_bytes=sum(totals.values()),
            sent_bytes_by_op=dict(totals),
        )
        if kind == "cuda":
            record.update(
                peak_allocated_gb=torch.cuda.max_memory_allocated() / 2**30,
                peak_reserved_gb=torch.cuda.max_memory_reserved() / 2**30,
            )
        else:
            record.update(peak_allocated_gb=None, peak_reserved_gb=None)
        if update is not None:
            torch.save({k: v.float().cpu() for k, v in update.tensors.items()}, out / "weights.pt")
    except Exception as err:  # reported by the parent
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    finally:
        (out / f"rank{rank}.json").write_text(json.dumps(record))
        if dist.is_initialized():
            dist.destroy_process_group()


def ranks_check(args, size: Size, model: str, work: Path, lora: bool) -> dict:
    """The unsharded learner here, then the sharded one over --ranks processes of this node
    (`ranks_rank`), the same steps and synthetic batches as `fsdp2_check`: the world size, per
    rank the bytes sent, peak memory and seconds, and the largest weight difference."""
    import os
    import socket

    import torch
    import torch.multiprocessing as mp

    from practicum.batch import rl_batch_of
    from practicum.config import load_config
    from practicum.engine.factory import load_trainable
    from practicum.learner import Learner
    from practicum.runtime.placement import policy_config

    name = f"ranks-{'lora' if lora else 'full'}"
    n = args.ranks
    record = {
        "name": name,
        "lora": lora,
        "world": n,
        "steps_wanted": size.steps,
        "error": None,
        "per_rank": [],
    }
    device = torch.device(args.device)
    record["backend"] = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda" and torch.cuda.device_count() < n:
        record["error"] = (
            f"--ranks {n} needs {n} GPUs, one per rank; this machine has "
            f"{torch.cuda.device_count()}"
        )
        return record
    over = [
        o
        for o in overrides(args, size, model, work, name, "sync", lora, size.steps)
        if not o.startswith("model.dtype=")
    ]
    out = work / name
    out.mkdir()
    try:
        cfg = load_config(
            None, [*over, "model.dtype=float32", "algo.kl_coef=0.05", "train.mini_batches=2"]
        )
        plain = Learner(load_trainable(policy_config(cfg)), cfg)
        vocab = len(plain.model.tokenizer)
        for step in range(size.steps):
            plain.train_step(rl_batch_of(synthetic_batch(step, size, vocab), cfg))
        want = {k: v.float().cpu() for k, v in plain.export_weights(plain.step).tensors.items()}
        del plain
        memory_reset(args.device)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = dict(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(n),
            LOCAL_WORLD_SIZE=str(n),
        )
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            mp.start_processes(
                ranks_rank,
                (cfg, size.steps, size, vocab, args.device, out),
                nprocs=n,
                start_method="spawn",
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k)
                else:
                    os.environ[k] = v
        record["per_rank"] = [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]
        failed = [r for r in record["per_rank"] if r["error"]]
        if failed:
            record["error"] = f"rank {failed[0]['rank']}: {failed[0]['error']}"
            return record
        got = torch.load(out / "weights.pt")
        record["steps"] = min(r["steps"] for r in record["per_rank"])
        record["learner_tokens_per_s"] = record["per_rank"][0]["learner_tokens_per_s"]
        record["max_abs_weight_diff"] = max((got[k] - want[k]).abs().max().item() for k in want)
    except Exception as err:  # reported with the rest
        traceback.print_exc()
        record["error"] = record["error"] or f"{type(err).__name__}: {err}".splitlines()[0][:500]
    return record


def weight_group_check(args, model: str) -> dict:
    """The check model's full weights on this device sent by a weight group of one (module
    doc): its backend, the bytes, the seconds of the send, the device's UUID (what the vLLM
    sampler compares to refuse NCCL to vLLM's own GPU)."""
    import torch

    from practicum.engine.hf_model import load_lm
    from practicum.engine.weight_group import WeightGroup, backend_for, buckets, meta_of

    record = {"name": WEIGHT_GROUP_RUN, "error": None}
    try:
        device = torch.device(args.device)
        tensors = load_lm(model, getattr(torch, args.dtype), device, "sdpa").state_dict()
        tensors = {k: v for k, v in tensors.items() if k != "lm_head.weight"}  # tied
        meta = meta_of(tensors)
        group = WeightGroup.open_server(1, backend_for(device), timeout_s=120).connect()
        start = time.perf_counter()
        group.send(list(tensors.values()), meta, bucket_mb=4)
        if device.type == "cuda":
            torch.cuda.synchronize()
            record["device_uuid"] = str(torch.cuda.get_device_properties(device).uuid)
        record.update(
            backend=group.backend,
            buckets=len(buckets(meta, 4)),
            mb=sum(t.numel() * t.element_size() for t in tensors.values()) / 2**20,
            send_seconds=time.perf_counter() - start,
        )
        group.close()
        if device.type == "cuda":
            record["cuda_ipc"] = cuda_ipc_probe(tensors)
    except Exception as err:  # reported with the rest
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    return record


def cuda_ipc_probe(tensors: dict) -> dict:
    """The ipc transport (`practicum.engine.weight_ipc`) from this process's GPU to a receiver
    in another process on the same GPU, fingerprints checked: seconds, bytes, each side's peak
    memory; {"status": "unsupported", ...} when CUDA IPC cannot open the handle here (gVisor
    may not pass it through) rather than a failure."""
    import multiprocessing as mp

    import torch

    from practicum.engine.weight_group import meta_of
    from practicum.engine.weight_stream import Membership, WeightRendezvous, send_stream

    rendezvous = WeightRendezvous(timeout_s=120)
    target = rendezvous.target(2, "gloo", "bfloat16", 64, verify=True, transport="ipc")
    ctx = mp.get_context("spawn")
    answer = ctx.Queue()
    proc = ctx.Process(
        target=ipc_receiver, args=(asdict(target), torch.cuda.current_device(), answer)
    )
    proc.start()
    member = Membership()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    try:
        send_stream(target, meta_of(tensors, torch.bfloat16), iter(tensors.items()), member)
        error = None
    except Exception as err:  # the receiver's own error says more
        error = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    seconds = time.perf_counter() - start
    member.close()
    try:
        got = answer.get(timeout=120)
    except Exception:  # noqa: BLE001 - reported below
        got = {"error": "the receiver sent nothing"}
    proc.join(30)
    if proc.is_alive():
        proc.kill()
    out = {
        "seconds": seconds,
        "sender_peak_extra_mb": (torch.cuda.max_memory_allocated() - before) / 2**20,
        "mb": sum(t.numel() * 2 for t in tensors.values() if t.is_floating_point()) / 2**20,
        **got,
    }
    if error or got.get("error"):
        out["status"] = "unsupported"
        out["sender_error"] = error
    else:
        out["status"] = "ok"
    return out


def ipc_receiver(target: dict, device: int, answer) -> None:
    """The probe's receiver: takes the stream into tensors of its own on the GPU and checks
    the fingerprints that followed it."""
    import torch

    from practicum.engine.weight_check import fingerprint
    from practicum.engine.weight_stream import Membership, WeightTarget

    torch.cuda.set_device(device)
    member = Membership()
    try:
        group = member.of(WeightTarget(**target), 1)
        held = {k: v.clone() for k, v in group.receive_stream()}
        match = group.sent_fingerprints == {k: fingerprint(v) for k, v in held.items()}
        answer.put(
            {
                "receiver_peak_mb": torch.cuda.max_memory_allocated() / 2**20,
                "tensors": len(held),
                "fingerprints_match": match,
                "error": None if match else "fingerprints differ",
            }
        )
    except Exception as err:  # noqa: BLE001 - reported by the sender
        answer.put({"error": f"{type(err).__name__}: {err}".splitlines()[0][:300]})
    finally:
        member.close()


class SleepingHFEngine:
    """Stands in for `vllm.LLM`'s sleep API (no vLLM on the lent machine) over an HF sampling
    copy on the same device, so `GPUHandover` drives real allocations: sleep level 1 moves the
    weights to CPU memory, level 2 drops them (a publish refills them), and the KV cache is a
    block of `kv_bytes` freed at sleep and taken again at the last wake."""

    def __init__(self, engine, device: str, kv_bytes: int):
        import torch

        self.engine, self.device, self.kv_bytes = engine, torch.device(device), kv_bytes
        self.kv = torch.empty(kv_bytes, dtype=torch.uint8, device=self.device)
        self.level = 0

    def sleep(self, level: int = 1) -> None:
        lm = self.engine.holder.lm
        lm.to("cpu") if level == 1 else lm.to_empty(device="meta")
        self.kv, self.level = None, level

    def wake_up(self, tags: list[str]) -> None:
        import torch

        lm = self.engine.holder.lm
        if "weights" in tags:
            lm.to(self.device) if self.level == 1 else lm.to_empty(device=self.device)
        if "kv_cache" in tags:
            self.kv = torch.empty(self.kv_bytes, dtype=torch.uint8, device=self.device)


def colocation_check(args, size: Size, model: str, work: Path, lora: bool) -> dict:
    """The colocated order (`practicum.engine.vllm_sleep.GPUHandover`: sleep, train, empty
    cache, wake weights, sync, empty cache, wake KV cache) for `cycles` cycles of sampling, a
    learner step and a publish, with `SleepingHFEngine` in vLLM's place on the learner's
    device: allocated and reserved memory after each phase, whether reserved memory grows
    from cycle to cycle, and whether the woken copy holds the learner's weights."""
    import torch

    from practicum.batch import rl_batch_of
    from practicum.config import load_config
    from practicum.engine.base import SamplingParams
    from practicum.engine.factory import load_trainable
    from practicum.engine.hf import HFEngineCopy
    from practicum.engine.vllm_sleep import GPUHandover
    from practicum.learner import Learner
    from practicum.runtime.placement import policy_config

    name = f"colocation-{'lora' if lora else 'full'}"
    cycles = 2 if args.quick else 50
    record = {
        "name": name,
        "lora": lora,
        "cycles_wanted": cycles,
        "cycles": 0,
        "error": None,
        "memory": [],
    }
    memory_reset(args.device)
    try:
        cfg = load_config(None, overrides(args, size, model, work, name, "sync", lora, cycles))
        policy = policy_config(cfg)
        learner = Learner(load_trainable(policy), cfg)
        stand_in = SleepingHFEngine(HFEngineCopy(policy), args.device, kv_bytes=64 * 2**20)
        stand_in.engine.load_weights(learner.export_weights(0))
        handover = GPUHandover(stand_in, full_weights=not lora)
        vocab = len(learner.model.tokenizer)
        params = SamplingParams(temperature=1.0, max_new_tokens=size.max_new_tokens)
        prompts = [[1 + (7 * i + j) % (vocab - 1) for j in range(16)] for i in range(4)]

        def mark(phase: str, cycle: int) -> None:
            if args.device.startswith("cuda"):
                record["memory"].append(
                    {
                        "cycle": cycle,
                        "phase": phase,
                        "allocated_gb": torch.cuda.memory_allocated() / 2**30,
                        "reserved_gb": torch.cuda.memory_reserved() / 2**30,
                    }
                )

        for cycle in range(cycles):
            stand_in.engine.generate(prompts, params, seeds=list(range(len(prompts))))
            mark("sampled", cycle)
            handover.sleep()
            mark("asleep", cycle)
            learner.train_step(rl_batch_of(synthetic_batch(cycle, size, vocab), cfg))
            mark("trained", cycle)
            handover.wake(
                lambda: stand_in.engine.load_weights(learner.export_weights(learner.step))
            )
            mark("awake", cycle)
            record["cycles"] = cycle + 1
        want = learner.export_weights(learner.step).tensors
        from peft import get_peft_model_state_dict

        copy = stand_in.engine.holder.model
        got = get_peft_model_state_dict(copy) if lora else dict(copy.named_parameters())
        record["max_abs_weight_diff"] = max(
            (want[k].float().cpu() - got[k].float().cpu()).abs().max().item()
            for k in want
            if k in got
        )
        awake = [m["reserved_gb"] for m in record["memory"] if m["phase"] == "awake"]
        if awake:
            settled = max(awake[1 : min(len(awake), 6)] or awake)
            record["reserved_growth_gb"] = max(awake) - settled
        learner = stand_in = None  # their GPU memory is freed before the figures below
    except Exception as err:  # an OOM included: reported with the rest
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    record.update(memory_figures(args.device))
    return record


def colocation_problems(record: dict) -> list[str]:
    """What fails a colocation run: a crash (an out-of-memory at a wake above all), fewer
    cycles than wanted, a woken copy that does not hold the learner's weights, or reserved
    memory that keeps growing after the first cycles (more than 0.25 GB)."""
    name = record["name"]
    if record["error"]:
        return [f"{name}: crashed: {record['error']}"]
    out = []
    if record["cycles"] < record["cycles_wanted"]:
        out.append(f"{name}: completed {record['cycles']} of {record['cycles_wanted']} cycles")
    if not record.get("max_abs_weight_diff", 1.0) <= 1e-6:
        out.append(
            f"{name}: the woken copy differs from the learner by "
            f"{record.get('max_abs_weight_diff')}"
        )
    if record.get("reserved_growth_gb", 0.0) > 0.25:
        out.append(
            f"{name}: reserved memory grew {record['reserved_growth_gb']:.2f} GB over the cycles"
        )
    return out


def long_context_check(args, size: Size, work: Path) -> dict:
    """The learner on one long row (benchmarks/long_context.py's random row: a tenth prompt,
    the rest scored) at 16k, 32k and 64k tokens, the check's model shape with 64k positions,
    full fine-tuning, gradient checkpointing as the config resolves it (on for a GPU): per
    length the peak allocated memory of the step, its seconds and tokens/s; the first length
    that fails (out of memory) is recorded and ends the probe."""
    import torch

    from practicum.config import load_config
    from practicum.engine.factory import load_trainable
    from practicum.learner import Learner
    from practicum.learner.rows import TrainBatch
    from practicum.runtime.placement import policy_config

    lengths = (256, 512) if args.quick else (16384, 32768, 65536)
    record = {"name": LONG_CONTEXT_RUN, "error": None, "rows": []}
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from long_context import random_row

        model = work / "long_model"
        build_model(model, load_tokenizer(args.tokenizer), size, positions=max(lengths))
        cfg = load_config(
            None,
            [
                f"model.model={model}",
                f"model.device={args.device}",
                f"model.dtype={args.dtype}",
                "model.lora=false",
                "train.micro_batch_size=1",
                "train.mini_batches=1",
                "train.warmup_steps=0",
                "rollout.group_size=1",
                "rollout.tasks_per_step=1",
                f"rollout.max_seq_len={max(lengths)}",
                *args.set,
            ],
        )
        learner = Learner(load_trainable(policy_config(cfg)), cfg)
        record["checkpointing"] = learner.model.cfg.gradient_checkpointing
        learner.train_step(TrainBatch([random_row(128, seed=1)]))  # one-time allocations
        for length in lengths:
            row = {"tokens": length}
            memory_reset(args.device)
            start = time.perf_counter()
            try:
                learner.train_step(TrainBatch([random_row(length)]))
            except Exception as err:  # out of memory above all: the probe stops here
                row["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
                record["rows"].append(row)
                break
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
                row["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
            row["seconds"] = time.perf_counter() - start
            row["tokens_per_s"] = length / row["seconds"]
            record["rows"].append(row)
            print(f"  {length} tokens: {row}", flush=True)
        del learner
    except Exception as err:  # reported with the rest
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    return record


def lora_gap_check(args, size: Size, model: str) -> dict:
    """benchmarks/lora_gap.py's arms on the check's model and device: the same weights sampled
    and scored with LoRA and full fine-tuning, bf16 and fp32, merged sampling on and off; each
    arm's gap mean, p99 and max per token (the ablation that explains the LoRA gap)."""
    record = {"name": LORA_GAP_RUN, "error": None, "rows": []}
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import lora_gap

        arms, rms = list(lora_gap.ARMS), [0.0, 1e-3]
        prompts, tokens = 16, size.max_new_tokens
        if args.quick:  # the mechanics only: one fp32 and two bf16 arms, a trained-like adapter
            arms, rms, prompts, tokens = (
                ["full-fp32", "lora-bf16-merged", "lora-bf16-unmerged"],
                [1e-3],
                2,
                8,
            )
        record["rows"] = lora_gap.arm_rows(
            model,
            arms,
            rms,
            prompts,
            tokens,
            args.device,
            log=lambda line: print(f"  {line}", flush=True),
        )
    except Exception as err:  # reported with the rest
        traceback.print_exc()
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    return record


def reference_model(spec: str) -> tuple[str | None, str | None]:
    """(local folder, None) when `spec` resolves without the network, else (None, why)."""
    if spec.lower() == "none":
        return None, "skipped (--reference-model none)"
    try:
        from practicum.engine.models import resolve_model

        return str(resolve_model(spec)), None
    except Exception as err:  # not installed here, or no weights: the check goes on
        return None, f"{type(err).__name__}: {err}".splitlines()[0][:300]


# -- the whole check ----------------------------------------------------------------------------
def environment(device: str) -> dict:
    import torch
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "device_name": platform.processor() or platform.machine(),
    }
    try:
        import peft

        info["peft"] = peft.__version__
    except ImportError:
        info["peft"] = None
    if device.startswith("cuda") and torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name()
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    return info


def write(out: Path, result: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out)


def check(args) -> dict:
    """Every run in a temporary folder; returns (and keeps writing) the result."""
    size = QUICK if args.quick else FULL
    wanted = [r for r in RUNS if r[0] in args.runs.split(",")]
    result = {
        "ok": False,
        "finished": False,
        "started_unix": time.time(),
        "environment": environment(args.device),
        "settings": {
            **asdict(size),
            "device": args.device,
            "dtype": args.dtype,
            "quick": args.quick,
            "max_gap": args.max_gap,
            "extra": args.set,
            "ranks": args.ranks,
        },
        "model": None,
        "runs": [],
        "fsdp2": [],
        "ranks": [],
        "weight_group": None,
        "lora_gap": None,
        "colocation": [],
        "long_context": None,
        "reference": None,
        "problems": [],
    }
    write(args.out, result)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = Path(tmp)
        result["model"] = build_model(work / "model", load_tokenizer(args.tokenizer), size)
        for name, mode, lora in wanted:
            print(f"gpu_check: {name}", flush=True)
            record = run_one(args, size, str(work / "model"), work, name, mode, lora, size.steps)
            result["runs"].append(record)
            result["problems"] += problems(record, args.max_gap)
            write(args.out, result)
        for name, lora in [r for r in FSDP2_RUNS if r[0] in args.runs.split(",")]:
            print(f"gpu_check: {name}", flush=True)
            record = fsdp2_check(args, size, str(work / "model"), work, lora)
            result["fsdp2"].append(record)
            if record["error"]:
                result["problems"].append(f"{record['name']}: crashed: {record['error']}")
            elif record["steps"] < record["steps_wanted"]:
                result["problems"].append(
                    f"{record['name']}: completed {record['steps']} of "
                    f"{record['steps_wanted']} steps"
                )
            write(args.out, result)
        for name, lora in [r for r in RANKS_RUNS if r[0] in args.runs.split(",")]:
            if args.ranks < 2:
                break
            print(f"gpu_check: {name} over {args.ranks} ranks", flush=True)
            record = ranks_check(args, size, str(work / "model"), work, lora)
            result["ranks"].append(record)
            result["problems"] += ranks_problems(record)
            write(args.out, result)
        if WEIGHT_GROUP_RUN in args.runs.split(","):
            print(f"gpu_check: {WEIGHT_GROUP_RUN}", flush=True)
            record = result["weight_group"] = weight_group_check(args, str(work / "model"))
            if record["error"]:
                result["problems"].append(f"{WEIGHT_GROUP_RUN}: crashed: {record['error']}")
            write(args.out, result)
        for name, lora in [r for r in COLOCATION_RUNS if r[0] in args.runs.split(",")]:
            print(f"gpu_check: {name}", flush=True)
            record = colocation_check(args, size, str(work / "model"), work, lora)
            result["colocation"].append(record)
            result["problems"] += colocation_problems(record)
            write(args.out, result)
        if LONG_CONTEXT_RUN in args.runs.split(","):
            print(f"gpu_check: {LONG_CONTEXT_RUN}", flush=True)
            record = result["long_context"] = long_context_check(args, size, work)
            if record["error"]:
                result["problems"].append(f"{LONG_CONTEXT_RUN}: crashed: {record['error']}")
            write(args.out, result)
        if LORA_GAP_RUN in args.runs.split(","):
            print(f"gpu_check: {LORA_GAP_RUN}", flush=True)
            record = result["lora_gap"] = lora_gap_check(args, size, str(work / "model"))
            if record["error"]:
                result["problems"].append(f"{LORA_GAP_RUN}: crashed: {record['error']}")
            write(args.out, result)
        folder, why = reference_model(args.reference_model)
        if folder is None:
            result["reference"] = {"model": args.reference_model, "skipped": why}
        else:
            print(f"gpu_check: reference {args.reference_model}", flush=True)
            record = run_one(
                args,
                size,
                folder,
                work,
                "reference",
                "sync",
                True,
                args.reference_steps or size.steps,
            )
            result["reference"] = record
            result["problems"] += problems(record, args.max_gap)
    result.update(
        ok=not result["problems"] and len(result["runs"]) == len(wanted),
        finished=True,
        wall_seconds=time.perf_counter() - started,
    )
    write(args.out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    faulthandler.dump_traceback_later(args.budget_s, exit=True)  # a hang ends with its stacks
    try:
        result = check(args)
    finally:
        faulthandler.cancel_dump_traceback_later()
    for line in result["problems"]:
        print(f"gpu_check: FAIL {line}", file=sys.stderr)
    print(f"gpu_check: {'ok' if result['ok'] else 'FAILED'}; {args.out}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
