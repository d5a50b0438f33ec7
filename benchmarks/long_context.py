"""The learner on one long row: peak host memory and seconds of one training step (the
`Learner`'s real step: micro-batching, forward, backward, clipping, AdamW) on one row of T
tokens, per arm, on the CPU.

Rows (`--rows`):
  random   T random token ids, the first tenth a prompt, the rest in the loss (advantage 1,
           behaviour log-prob -2); a tiny random Llama (the test fixture's shape: 2 layers,
           hidden 64, 4 query / 2 key-value heads, SmolLM2's 49,152-token vocabulary) whose
           native context is the longest T, so no RoPE scaling is involved.
  swe      the SWE environment's own episodes (the scripted demonstrator's trajectories on
           configs/swe.yaml's training tasks, run and graded in the real sandbox and stored as
           `practicum sft` stores them), their segments laid back to back into one row of T
           tokens (one such episode is 1-2k tokens), with model.rope_scaling YaRN x2 over an
           8,192-token native context (16k): the learner-only probe of issue 36 (rows of
           8-16k tokens past SmolLM2's context), on a tiny random Llama with SmolLM2's
           context or (--model smollm2) on SmolLM2-135M-Instruct itself.

Arms (`ARMS`): config overrides applied to the run config, so an arm is one entry:
  plain          model.gradient_checkpointing=false
  checkpointing  model.gradient_checkpointing=true (each decoder layer recomputed in backward)
Packing (`train.max_tokens_per_micro_batch`) and sequence parallelism add their own entries
after they land (an arm that needs several ranks adds a runner beside `measure`).

Each (arm, T) runs in a child process of its own: after a warm-up step on a short row, VmHWM
(peak RSS) is reset through /proc/self/clear_refs, one step runs, and the peak above the RSS
before it is recorded. The children run with MALLOC_MMAP_THRESHOLD_ at 1 MiB so that RSS
follows the live tensors (glibc otherwise keeps freed blocks), and the parent kills a child
whose RSS passes --max-gb (the machine is shared). The slope of peak memory against T is a
least-squares fit per arm; the log-log slope between the two longest rows is 1 for linear
growth, 2 for quadratic.

    python benchmarks/long_context.py                      # 2k, 8k, 32k; both arms
    python benchmarks/long_context.py --rows swe                  # 8k, 16k; tiny model
    python benchmarks/long_context.py --rows swe --model smollm2 --arms checkpointing
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results"
sys.path.insert(0, str(HERE))
from _machine import machine_state  # noqa: E402

ARMS: dict[str, list[str]] = {
    "plain": ["model.gradient_checkpointing=false"],
    "checkpointing": ["model.gradient_checkpointing=true"],
}
"""Arm name -> config overrides (module doc)."""

TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
SWE_NATIVE = 8192
"""SmolLM2-135M's native context; the swe rows run YaRN x2 over it."""
YARN = "model.rope_scaling={rope_type: yarn, factor: 2}"
WARM_UP = 256


# -- the child: one (arm, T) -----------------------------------------------------------------
def rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def write_model(folder: Path, context: int) -> None:
    """A random tiny Llama (`TINY`) with SmolLM2's tokenizer and `context` positions."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.models import load_builtin_tokenizer

    tok = load_builtin_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        max_position_embeddings=context,
        **TINY,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)


def random_row(length: int, seed: int = 0):
    import random

    from practicum.learner.rows import TrainRow

    rng = random.Random(seed)
    ids = [rng.randrange(100, 40000) for _ in range(length)]
    prompt = length // 10
    mask = [0.0] * prompt + [1.0] * (length - prompt)
    return TrainRow(ids, mask, advantages=list(mask), behaviour_logp=[-2.0 * m for m in mask])


def swe_row(length: int, episodes_file: Path):
    """One row of `length` tokens: the stored SWE episodes' segments one after another (each
    a prompt then the agent's turns and the observations), repeated if need be, cut at
    `length`; the policy's tokens in the loss."""
    from practicum.learner.rows import TrainRow

    segments = json.loads(episodes_file.read_text())
    ids: list[int] = []
    mask: list[float] = []
    while len(ids) < length:
        for seg in segments:
            ids += seg["input_ids"]
            mask += seg["loss_mask"]
    ids, mask = ids[:length], [float(m) for m in mask[:length]]
    return TrainRow(ids, mask, advantages=list(mask), behaviour_logp=[-2.0 * m for m in mask])


def measure(
    arm: str, length: int, model: Path, rows: str, episodes: Path | None, threads: int
) -> dict:
    """One training step on one row of `length` tokens: peak RSS above the RSS before it,
    and seconds."""
    import torch

    from practicum.config import load_config
    from practicum.engine.factory import load_trainable
    from practicum.learner import Learner
    from practicum.learner.rows import TrainBatch
    from practicum.runtime.placement import policy_config

    torch.set_num_threads(threads)
    extra = [YARN] if rows == "swe" else []
    cfg = load_config(
        None,
        [
            f"model.model={model}",
            "model.dtype=float32",
            "model.device=cpu",
            "train.micro_batch_size=1",
            "train.mini_batches=1",
            "train.warmup_steps=0",
            "train.lr=1e-4",
            "rollout.group_size=1",
            "rollout.tasks_per_step=1",
            *extra,
            *ARMS[arm],
        ],
    )
    learner = Learner(load_trainable(policy_config(cfg)), cfg)
    row = random_row(length) if rows == "random" else swe_row(length, episodes)
    learner.train_step(TrainBatch([random_row(WARM_UP, seed=1)]))  # one-time allocations
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = rss_kb("VmRSS") * 1024
    start = time.perf_counter()
    out = learner.train_step(TrainBatch([row]))
    seconds = time.perf_counter() - start
    peak = rss_kb("VmHWM") * 1024
    return {
        "arm": arm,
        "tokens": length,
        "rows": rows,
        "checkpointing": learner.model.cfg.gradient_checkpointing,
        "peak_above_start_mb": (peak - before) / 2**20,
        "seconds": seconds,
        "tokens_per_s": length / seconds,
        "loss": out["loss"],
        "trained_tokens": int(out["train_tokens"]),
    }


# -- the stored SWE episodes -------------------------------------------------------------------
def store_swe_episodes(path: Path, work: Path, model: Path) -> dict:
    """The SWE demonstrator's episodes on configs/swe.yaml's training tasks, run and graded in
    the real environment (`practicum sft`'s collection, `practicum.runtime.sft.collect`) and
    stored in its run folder's episodes.jsonl; their segments (token ids, loss masks) read
    back from the store are written to `path`."""
    from practicum.config import load_config
    from practicum.runtime.session import open_session
    from practicum.runtime.sft import collect
    from practicum.store import EpisodeStore

    cfg = load_config(
        REPO / "configs" / "swe.yaml",
        [
            f"run.out_dir={work}",
            f"model.model={model}",
            "model.dtype=float32",
            "model.device=cpu",
            "stages=[]",
            "rollout.max_turns=8",
            "rollout.max_seq_len=8192",
            "rollout.env_workers=1",
            "task.options.episode_obs_chars=20000",
        ],
    )
    session = open_session(cfg)
    try:
        collect(session, progress=False)
    finally:
        session.close()
    episodes = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    segments = [
        {"input_ids": list(seg.input_ids), "loss_mask": list(seg.loss_mask)}
        for e in episodes
        for seg in e.segments()
    ]
    path.write_text(json.dumps(segments))
    lengths = [len(s["input_ids"]) for s in segments]
    return {
        "episodes": len(episodes),
        "solved": sum(e.reward > 0 for e in episodes),
        "segments": len(segments),
        "segment_tokens_min_max": [min(lengths), max(lengths)],
        "tokens": sum(lengths),
    }


# -- the parent ---------------------------------------------------------------------------------
def run_child(arm: str, length: int, model: Path, args, episodes: Path | None) -> dict:
    """`measure` in a child process, killed when its RSS passes args.max_gb."""
    env = {
        **os.environ,
        "MALLOC_MMAP_THRESHOLD_": str(2**20),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        __file__,
        "--child",
        arm,
        str(length),
        str(model),
        args.rows,
        str(episodes or ""),
        str(args.threads),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status = Path(f"/proc/{proc.pid}/status")
    killed = False
    while proc.poll() is None:
        try:
            rss = (
                next(
                    int(line.split()[1])
                    for line in status.read_text().splitlines()
                    if line.startswith("VmRSS:")
                )
                * 1024
            )
        except (OSError, StopIteration):
            rss = 0
        if rss > args.max_gb * 2**30:
            proc.kill()
            killed = True
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    if killed:
        return {
            "arm": arm,
            "tokens": length,
            "rows": args.rows,
            "stopped": f"RSS passed {args.max_gb} GiB",
        }
    if proc.returncode != 0:
        raise SystemExit(f"long_context: {arm} at {length} tokens failed:\n{stderr[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def fit(results: list[dict]) -> dict:
    """Per arm: least-squares slope of peak MB against T (MB per 1k tokens), and the log-log
    slope between the two longest rows (1: linear, 2: quadratic)."""
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in results):
        pts = sorted(
            (r["tokens"], r["peak_above_start_mb"])
            for r in results
            if r["arm"] == arm and "peak_above_start_mb" in r
        )
        if len(pts) < 2:
            continue
        n = len(pts)
        mx, my = sum(t for t, _ in pts) / n, sum(m for _, m in pts) / n
        slope = sum((t - mx) * (m - my) for t, m in pts) / sum((t - mx) ** 2 for t, _ in pts)
        (t1, m1), (t2, m2) = pts[-2], pts[-1]
        out[arm] = {
            "mb_per_1k_tokens": slope * 1000,
            "intercept_mb": my - slope * mx,
            "loglog_slope_longest": math.log(m2 / m1) / math.log(t2 / t1),
        }
    return out


def table(results: list[dict], fits: dict) -> str:
    lines = [
        "| rows | arm | tokens | checkpointing | peak above start (MB) | seconds | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "stopped" in r:
            lines.append(f"| {r['rows']} | {r['arm']} | {r['tokens']} | | {r['stopped']} | | |")
            continue
        lines.append(
            f"| {r['rows']} | {r['arm']} | {r['tokens']} | {r['checkpointing']} | "
            f"{r['peak_above_start_mb']:.0f} | {r['seconds']:.1f} | "
            f"{r['tokens_per_s']:.0f} |"
        )
    lines += [
        "",
        "| arm | MB per 1k tokens (least squares) | log-log slope, two longest |",
        "|---|---|---|",
    ]
    lines += [
        f"| {arm} | {f['mb_per_1k_tokens']:.1f} | {f['loglog_slope_longest']:.2f} |"
        for arm, f in fits.items()
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", choices=("random", "swe"), default="random")
    ap.add_argument(
        "--lengths",
        default=None,
        help="comma-separated T (default: 2048,8192,32768 for random rows, 8192,16384 for swe)",
    )
    ap.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS)}")
    ap.add_argument(
        "--model",
        choices=("tiny", "smollm2"),
        default="tiny",
        help="tiny: the random Llama above; smollm2: the real SmolLM2-135M-Instruct "
        "(swe rows only: its native context is the 8,192 the rows stretch)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads per child")
    ap.add_argument("--max-gb", type=float, default=8.0, help="kill a child past this RSS")
    ap.add_argument("--output", default=None, help="results file stem")
    args = ap.parse_args()
    lengths = [
        int(x)
        for x in (
            args.lengths or ("2048,8192,32768" if args.rows == "random" else "8192,16384")
        ).split(",")
    ]
    arms = args.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise SystemExit(f"long_context: unknown arms {sorted(unknown)} (known: {list(ARMS)})")
    state = machine_state()
    import torch

    from practicum.engine.device import _cpu_has_bf16

    state.update(torch=torch.__version__, cpu_bf16=_cpu_has_bf16(), threads=args.threads)
    results, extra = [], {}
    with tempfile.TemporaryDirectory(prefix="long-context-") as tmp:
        model = Path(tmp) / "model"
        episodes = None
        if args.model == "smollm2":
            if args.rows != "swe":
                raise SystemExit("long_context: --model smollm2 goes with --rows swe")
            from practicum.engine.models import resolve_model

            model = resolve_model("smollm2-135m-instruct")
        if args.rows == "swe":
            if args.model == "tiny":
                write_model(model, SWE_NATIVE)
            episodes = Path(tmp) / "episodes.json"
            extra["swe_episodes"] = store_swe_episodes(episodes, Path(tmp) / "runs", model)
            print(json.dumps(extra), flush=True)
        else:
            write_model(model, max(lengths))
        for length in lengths:
            for arm in arms:
                r = run_child(arm, length, model, args, episodes)
                print(json.dumps(r), flush=True)
                results.append(r)
    state["load_avg_1min_after"] = os.getloadavg()[0]
    fits = fit(results)
    stem = args.output or (
        "long_context" if args.rows == "random" else f"long_context_swe_{args.model}"
    )
    payload = {
        "benchmark": "long_context",
        "rows": args.rows,
        "model": TINY if args.model == "tiny" else "smollm2-135m-instruct",
        "rope_scaling": YARN if args.rows == "swe" else None,
        "machine": state,
        "results": results,
        "fits": fits,
        **extra,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"{stem}.json").write_text(json.dumps(payload, indent=1))
    text = (
        f"# long_context ({args.rows} rows, {args.model} model; CPU: "
        f"{state.get('cpu', '?')}, bf16 {state['cpu_bf16']}, {args.threads} thread(s), "
        f"load {state['load_avg_1min']:.1f} "
        f"before / {state['load_avg_1min_after']:.1f} after)\n\n{table(results, fits)}\n"
    )
    (OUT / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: children stop, temporary folders go
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        arm, length, model, rows, episodes, threads = sys.argv[2:8]
        print(
            json.dumps(
                measure(
                    arm,
                    int(length),
                    Path(model),
                    rows,
                    Path(episodes) if episodes else None,
                    int(threads),
                )
            )
        )
    else:
        main()
