"""One GRPO iteration of practicum vs TRL's GRPOTrainer: wall seconds each, and the ratio.

An iteration = sample a group of completions for one arithmetic prompt, score them, one policy
update on the group (and, for practicum, publishing the new adapter to its sampler). Both
frameworks run in this one benchmark, interleaved iteration by iteration (practicum in this
process, TRL in a subprocess in its own venv, scripts/trl_venv.sh, held in lockstep over
stdin/stdout), so a change in machine load hits both alike; the ratio is the number to read.

Matched: the model folder (practicum's offline `smollm2-135m-instruct`, given to TRL as the
same local HF directory), dtype, LoRA (r, alpha, dropout 0, the same seven target linears),
the chat-templated prompt, group size, temperature 1 / top-p 1, completion length (eos is
suppressed on both sides, so every completion has exactly --new-tokens tokens: TRL through
`min_new_tokens`, practicum through an empty eos set), the reward function, GRPO advantages
scaled by the group std, PPO-clip with eps_low / eps_high (DAPO clip-higher), token-mean loss
(TRL loss_type="dapo"), no KL term (TRL beta=0, so no reference model), one optimizer step per
generation batch over the whole group (TRL per_device_train_batch_size = group,
steps_per_generation = 1; practicum one mini-batch, one epoch, micro-batch = group), AdamW
(betas 0.9/0.99, no weight decay), grad clip 1, torch threads, no gradient checkpointing
(TRL's default is on; turned off here as in practicum).

dtype "auto" resolves to fp32 on a CPU without AVX-512 (bf16 there is emulated and slower).

Not matched (each framework's own design): TRL samples with `model.generate` through the peft
LoRA layers; practicum samples with its own KV-cached loop on a merged copy and re-merges the
adapter into it after each update (counted in practicum's time as "publish"); it prefills a
group's repeated prompt once. TRL scores log-probs with its fused, tiled LM head (on CPU over
every position of prompt + completion); practicum projects only the completion (loss)
positions and runs the group's shared prompt through the backbone once. TRL's step
includes its HF Trainer bookkeeping (logging every step, metrics); practicum's iteration is its
engine + learner (`HFSampler.generate`, `Learner.train_step`, `load_weights`), without the
runtime's episode store and environment workers.

Printed: per-iteration seconds (median over --iterations after --warmup), practicum's
breakdown (sampling, learner, publish) against TRL's (generate, rest of the step), plain
`generate` and plain forward+backward on the same tokens as references (run after every timed
iteration; medians), and with --profile the top operators of one practicum learner step.
Written to benchmarks/results/vs_trl.json with the machine state (load average before/after).

    python benchmarks/vs_trl.py                    # 1 warm-up + 3 timed iterations each
    python benchmarks/vs_trl.py --iterations 1 --new-tokens 16 --no-reference   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from _machine import machine_state
from _trl_grpo_iteration import PROMPT, arithmetic_reward

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "vs_trl.json"


def practicum_side(args, path: Path):
    """(trainable, sampler, learner, prompt ids) built as `practicum train` builds them."""
    from practicum.config import load_config
    from practicum.engine.hf import PolicyConfig, load_hf_engine
    from practicum.learner import Learner

    cfg = load_config(
        None,
        [
            f"model.model={path}",
            f"model.dtype={args.dtype}",
            f"model.lora_r={args.lora_r}",
            f"model.lora_alpha={args.lora_alpha}",
            f"rollout.group_size={args.group_size}",
            "rollout.tasks_per_step=1",
            f"sampling.max_new_tokens={args.new_tokens}",
            "algo.advantage=grpo",
            "algo.dynamic_sampling=false",
            "algo.mask_overlong=false",
            f"algo.clip_low={args.clip_low}",
            f"algo.clip_high={args.clip_high}",
            "algo.kl_coef=0",
            "train.mini_batches=1",
            "train.epochs=1",
            f"train.micro_batch_size={args.group_size}",
            f"train.lr={args.lr}",
            "train.warmup_steps=0",
            "train.schedule=constant",
        ],
    )
    m = cfg.model
    trainable, sampler = load_hf_engine(
        PolicyConfig(
            model=m.model,
            dtype=m.dtype,
            lora=True,
            lora_r=m.lora_r,
            lora_alpha=m.lora_alpha,
            lora_dropout=m.lora_dropout,
            lora_target_modules=list(m.lora_target_modules),
            merged_sampling=m.merged_sampling,
            seed=args.seed,
        )
    )
    sampler.eos_ids = set()  # every completion runs the full length (TRL: min_new_tokens)
    learner = Learner(trainable, cfg)
    prompt = trainable.tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    return trainable, sampler, learner, list(prompt), cfg


def practicum_iteration(trainable, sampler, learner, prompt: list[int], cfg, seed: int) -> dict:
    """Sample the group, score it, train on it, publish the new adapter; seconds per phase."""
    from practicum.batch import rl_batch_of
    from practicum.engine.base import SamplingParams
    from practicum.episode import Episode, Turn

    n = cfg.rollout.group_size
    params = SamplingParams(
        temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens
    )
    t0 = time.perf_counter()
    samples = sampler.generate([prompt] * n, params, seeds=[seed * n + i for i in range(n)])
    t1 = time.perf_counter()
    episodes = [
        Episode(
            "arith",
            f"g{seed}",
            prompt,
            [
                Turn(
                    s.token_ids,
                    s.logprobs,
                    sampler.version,
                    action_text=s.text,
                    finish_reason=s.finish_reason,
                )
            ],
            reward=arithmetic_reward(s.text),
        )
        for s in samples
    ]
    stats = learner.train_step(rl_batch_of(episodes, cfg))
    t2 = time.perf_counter()
    sampler.load_weights(trainable.export_weights(learner.step))
    t3 = time.perf_counter()
    return {
        "seconds": t3 - t0,
        "sample_seconds": t1 - t0,
        "learner_seconds": t2 - t1,
        "publish_seconds": t3 - t2,
        "tokens": sum(len(s.token_ids) for s in samples),
        "reward_mean": sum(e.reward for e in episodes) / n,
        "rows": len(samples),
        "train_tokens": stats["train_tokens"] if stats else 0,
    }


def reference_timings(trainable, sampler, prompt: list[int], cfg, seed: int) -> dict:
    """The same work done plainly: HF `generate` on the merged copy (no per-row seeds, no
    per-token log-probs), and a forward + backward of the same rows through the peft model
    with the model's own loss (labels on the completion tokens)."""
    n, new = cfg.rollout.group_size, cfg.sampling.max_new_tokens
    lm = sampler.merged.lm if sampler.merged is not None else sampler.lm
    ids = torch.tensor([prompt] * n)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = lm.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=trainable.pad_id,
        )
    t1 = time.perf_counter()
    labels = out.clone()
    labels[:, : len(prompt)] = -100
    loss = trainable.model(input_ids=out, attention_mask=torch.ones_like(out), labels=labels).loss
    loss.backward()
    t2 = time.perf_counter()
    trainable.model.zero_grad(set_to_none=True)
    return {
        "generate_seconds": t1 - t0,
        "forward_backward_seconds": t2 - t1,
        "tokens": int(out.numel()),
    }


def profile_learner(trainable, sampler, learner, prompt, cfg, seed: int, top: int) -> list:
    """Top operators (self CPU time) of one practicum iteration's learner step."""
    from torch.profiler import ProfilerActivity, profile

    from practicum.batch import rl_batch_of
    from practicum.engine.base import SamplingParams
    from practicum.episode import Episode, Turn

    n = cfg.rollout.group_size
    samples = sampler.generate(
        [prompt] * n,
        SamplingParams(max_new_tokens=cfg.sampling.max_new_tokens),
        seeds=[seed * n + i for i in range(n)],
    )
    eps = [
        Episode(
            "arith",
            "gp",
            prompt,
            [Turn(s.token_ids, s.logprobs, sampler.version)],
            reward=arithmetic_reward(s.text),
        )
        for s in samples
    ]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.train_step(rl_batch_of(eps, cfg))
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) or 1
    return [
        {
            "op": e.key,
            "self_seconds": e.self_cpu_time_total / 1e6,
            "share": e.self_cpu_time_total / total,
            "calls": e.count,
        }
        for e in rows[:top]
    ]


class TRLProcess:
    """TRL's GRPOTrainer in its own venv, one training step per `step()` call."""

    def __init__(self, args, path: Path, dtype: torch.dtype, steps: int, out_dir: str):
        from practicum.engine.options import LLAMA_LINEARS

        python = (
            subprocess.run(
                ["bash", str(ROOT / "scripts" / "trl_venv.sh")],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        settings = {
            "model": str(path),
            "steps": steps,
            "threads": args.threads,
            "seed": args.seed,
            "dtype": str(dtype).removeprefix("torch."),
            "group_size": args.group_size,
            "new_tokens": args.new_tokens,
            "out_dir": out_dir,
            "clip_low": args.clip_low,
            "clip_high": args.clip_high,
            "lr": args.lr,
            "lora_r": args.lora_r,
            "lora_alpha": args.lora_alpha,
            "target_modules": list(LLAMA_LINEARS),
        }
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(
            HF_HUB_OFFLINE="1",
            OMP_NUM_THREADS=str(args.threads),
            MKL_NUM_THREADS=str(args.threads),
            TOKENIZERS_PARALLELISM="false",
        )
        self.log = open(Path(out_dir) / "trl_stderr.log", "w")
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).parent / "_trl_grpo_iteration.py"), json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        self.info = self._read("ready")

    def _read(self, key: str) -> dict:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and key in msg:
                return msg
        raise RuntimeError(f"the TRL process ended (exit {self.proc.wait()}); see {self.log.name}")

    def step(self) -> dict:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._read("seconds")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows) if rows else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto", help="auto, float32 or bfloat16 (both sides)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=int, default=32)
    ap.add_argument("--clip-low", type=float, default=0.2)
    ap.add_argument("--clip-high", type=float, default=0.28)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations first (each side)")
    ap.add_argument("--iterations", type=int, default=3, help="timed iterations (each side)")
    ap.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS", "2")),
        help="torch threads on both sides",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-trl", action="store_true", help="practicum only (no ratio)")
    ap.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the plain generate / forward+backward reference timings",
    )
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile one practicum learner step and list its top N operators",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    from practicum.engine.hf_model import PolicyConfig, pick_device, resolve_dtype
    from practicum.engine.models import resolve_model

    torch.set_num_threads(args.threads)
    state = machine_state()
    path = resolve_model(args.model)
    dtype = resolve_dtype(PolicyConfig(dtype=args.dtype), pick_device("auto"))
    total = args.warmup + args.iterations
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as tmp:
        trl = None if args.no_trl else TRLProcess(args, path, dtype, total, tmp)
        try:
            trainable, sampler, learner, prompt, cfg = practicum_side(args, path)
            ours, theirs, plain = [], [], []
            for i in range(total):  # interleaved: both sides see the same machine load
                row = practicum_iteration(trainable, sampler, learner, prompt, cfg, seed=i)
                other = trl.step() if trl is not None else None
                label = "warm-up" if i < args.warmup else f"iteration {i - args.warmup + 1}"
                print(
                    f"{label}: practicum {row['seconds']:.1f} s"
                    + (f", TRL {other['seconds']:.1f} s" if other else ""),
                    file=sys.stderr,
                )
                if i >= args.warmup:
                    ours.append(row)
                    if other:
                        theirs.append(other)
                    if not args.no_reference:  # interleaved too
                        plain.append(reference_timings(trainable, sampler, prompt, cfg, seed=i))
            reference = {k: median(plain, k) for k in plain[0]} if plain else None
            profile = (
                profile_learner(trainable, sampler, learner, prompt, cfg, total, args.profile)
                if args.profile
                else None
            )
        finally:
            if trl is not None:
                trl.close()
    practicum_s, trl_s = median(ours, "seconds"), median(theirs, "seconds")
    result = {
        "_machine": {
            **state,
            "load_avg_1min_after": os.getloadavg()[0],
            "torch_threads": args.threads,
            "torch": torch.__version__,
            "nice": os.nice(0),
        },
        "settings": {
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "model_path": str(path),
            "dtype_resolved": str(dtype),
            "prompt": PROMPT,
            "prompt_tokens": len(prompt),
        },
        "trl": trl.info if trl is not None else None,
        "practicum_seconds": practicum_s,
        "trl_seconds": trl_s,
        "ratio_practicum_over_trl": practicum_s / trl_s if theirs else None,
        "practicum_breakdown": {
            k: median(ours, k) for k in ("sample_seconds", "learner_seconds", "publish_seconds")
        },
        "trl_breakdown": {
            "generate_seconds": median(theirs, "generate_seconds"),
            "rest_seconds": median(
                [{"r": r["seconds"] - r["generate_seconds"]} for r in theirs], "r"
            ),
        }
        if theirs
        else None,
        "reference": reference,
        "profile": profile,
        "ratios": {
            "learner_over_plain_forward_backward": median(ours, "learner_seconds")
            / reference["forward_backward_seconds"],
            "sampling_over_plain_generate": median(ours, "sample_seconds")
            / reference["generate_seconds"],
        }
        if reference
        else None,
        "practicum_iterations": ours,
        "trl_iterations": theirs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    report(result)


def report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s = result["settings"]
    t = Table(
        title=f"One GRPO iteration, median of {s['iterations']} ({s['group_size']} x "
        f"{s['new_tokens']} tokens, LoRA r{s['lora_r']}, {s['dtype_resolved']})"
    )
    for col in ("framework", "s / iteration", "sampling s", "learner s", "publish s"):
        t.add_column(col, justify="right")
    b = result["practicum_breakdown"]
    t.add_row(
        "practicum",
        f"{result['practicum_seconds']:.2f}",
        f"{b['sample_seconds']:.2f}",
        f"{b['learner_seconds']:.2f}",
        f"{b['publish_seconds']:.2f}",
    )
    if result["trl_breakdown"]:
        tb = result["trl_breakdown"]
        t.add_row(
            "TRL",
            f"{result['trl_seconds']:.2f}",
            f"{tb['generate_seconds']:.2f}",
            f"{tb['rest_seconds']:.2f}",
            "-",
        )
        t.add_row("practicum / TRL", f"{result['ratio_practicum_over_trl']:.2f}", "", "", "")
    console.print(t)
    if result["reference"]:
        r = result["reference"]
        q = result["ratios"]
        console.print(
            f"plain HF generate of the same batch: {r['generate_seconds']:.2f} s "
            f"(practicum sampling / plain: {q['sampling_over_plain_generate']:.2f}); "
            f"plain forward+backward (peft, model loss) of the same rows: "
            f"{r['forward_backward_seconds']:.2f} s (practicum learner / plain: "
            f"{q['learner_over_plain_forward_backward']:.2f})"
        )
    if result["profile"]:
        t = Table(title="practicum learner step: top operators by self CPU time")
        for col in ("op", "self s", "share", "calls"):
            t.add_column(col, justify="right")
        for p in result["profile"]:
            t.add_row(p["op"], f"{p['self_seconds']:.2f}", f"{p['share']:.0%}", str(p["calls"]))
        console.print(t)
    m = result["_machine"]
    console.print(
        f"{m.get('cpu', '')}, {m['torch_threads']} torch threads, nice {m['nice']}, "
        f"load average (1 min) before/after {m['load_avg_1min']:.2f}/"
        f"{m['load_avg_1min_after']:.2f} on {m['cpus']} CPUs, busy before "
        f"{m['busy_before']:.0%}"
    )


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
