"""Host memory of the sharded learner's ranks, phase by phase, against a budget that says "no rank
holds the whole model": 4 gloo ranks on the CPU, a random Llama read from safetensors files.

For each phase (init: build the learner; step: one train_step; save_policy: the policy folder a
user serves, `learner.save_policy`; load_policy: that folder back, as `model.init` loads it;
save: a checkpoint, `learner.save`; resume: `learner.load` of it) every rank records its peak RSS
above its RSS after imports (Linux VmHWM, reset before each phase through /proc/self/clear_refs),
and which weight files it
opened: Python's audit hook ("open" events of *.safetensors) plus every call into the safetensors
package (which opens files from Rust, where the hook does not see them). The budget, with
state = what exists after the phase (at init the weights and a KL reference; from the step on
also gradients and AdamW moments) and unit = the largest FSDP unit unsharded (the root's
embedding and head included):

    each rank:   peak above imports <= 1.1 (state / N + 2 unit)
    all ranks:   sum of peaks       <= state + N (2 unit)

Rows: a 0.5B Llama (Qwen2.5-0.5B's shape, tied embeddings) fully fine-tuned without KL, with this
checkout's code and with the code of `--main` (git main before the sharded load, extracted with
`git archive`), and a 1B Llama (Llama-3.2-1B's shape) with LoRA, this checkout only. The
checkpoint phases run whatever src/practicum/learner/checkpoint.py does: a resume that would
load a whole `trainer.pt` on every rank is skipped when the machine lacks the memory for it, and
every run is stopped when the machine's available memory falls below `--min-available-gb`.
Heavy: run it alone, one row at a time (it does), on an otherwise idle machine.

glibc's malloc keeps freed blocks below a threshold that grows up to 32 MiB as big blocks are
freed, so a rank's RSS keeps memory its tensors no longer use (a GPU's caching allocator would
count it as reserved, not allocated). By default the ranks run with MALLOC_MMAP_THRESHOLD_ fixed
at 1 MiB, so that RSS follows the tensors alive; `--glibc-default` measures without it.

    python benchmarks/sharded_memory.py [--rows 0.5b-full-new,1b-lora-new] [--main 743cb4e]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results"
GIB = 1024**3
WORLD = 4

MODELS = {
    "0.5b": {
        "vocab_size": 151936,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
    "1b": {
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "tiny": {
        "vocab_size": 49152,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}
"""Random Llamas shaped as Qwen2.5-0.5B and Llama-3.2-1B (tied embeddings, no biases), and a
tiny one to try the script."""

ROWS = {
    "0.5b-full-main": {"model": "0.5b", "lora": False, "code": "main"},
    "0.5b-full-new": {"model": "0.5b", "lora": False, "code": "new"},
    "1b-lora-new": {"model": "1b", "lora": True, "code": "new"},
    "tiny-full-main": {"model": "tiny", "lora": False, "code": "main"},
    "tiny-full-new": {"model": "tiny", "lora": False, "code": "new"},
    "tiny-lora-new": {"model": "tiny", "lora": True, "code": "new"},
}
DEFAULT_ROWS = ("0.5b-full-main", "0.5b-full-new", "1b-lora-new")
PHASES = ("init", "step", "save_policy", "load_policy", "save", "resume")


# -- the model files ---------------------------------------------------------------------------
def write_random_llama(folder: Path, shape: dict) -> int:
    """A random bf16 Llama as a HF folder (safetensors files of at most 1 GiB and their index,
    config, SmolLM2's tokenizer), written one tensor at a time; its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.hf_trainable import distinct_tensors
    from practicum.engine.models import load_builtin_tokenizer
    from practicum.learner.tensor_files import Planned, StreamWriter

    tokenizer = load_builtin_tokenizer()
    config = LlamaConfig(
        **shape,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype=torch.bfloat16,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    state = distinct_tensors(model.state_dict(keep_vars=True))[0]
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    with StreamWriter(
        folder, "model", [Planned(k, torch.bfloat16, tuple(v.shape)) for k, v in state.items()], GIB
    ) as writer:
        for name, meta in state.items():
            value = (
                torch.ones(meta.shape)
                if "norm" in name
                else torch.randn(meta.shape, generator=g) * 0.02
            )
            writer.write(name, value.bfloat16())
        writer.close()
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(v.numel() for v in state.values())


# -- what each rank runs -----------------------------------------------------------------------
def rss_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def mem_available() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise KeyError("MemAvailable")


def watch_weight_files(log: list, phase: list) -> None:
    """Record every open of a .safetensors file by Python, and every call into the safetensors
    package's readers (before transformers and peft import them)."""
    import safetensors
    import safetensors.torch

    def audit(event: str, args: tuple) -> None:
        if event == "open" and str(args[0]).endswith(".safetensors"):
            seen = [phase[0], str(args[0]), "open"]
            if seen not in log[-50:]:  # one entry per file and phase, not per tensor read
                log.append(seen)

    sys.addaudithook(audit)

    def wrap(fn, how):
        def recorded(filename, *a, **k):
            log.append([phase[0], str(filename), how])
            return fn(filename, *a, **k)

        return recorded

    safe_open = wrap(safetensors.safe_open, "safetensors.safe_open")
    load_file = wrap(safetensors.torch.load_file, "safetensors.load_file")
    safetensors.safe_open = safetensors.torch.safe_open = safe_open
    safetensors.torch.load_file = load_file


def batch(seed: int, rows: int = 8, prompt: int = 16, reply: int = 24):
    """`rows` episodes in groups of 4 (rewards 0 / 1) with off-policy behaviour log-probs."""
    import random

    from practicum.episode import Episode, Turn

    rng = random.Random(seed)
    out = []
    for g in range(rows // 4):
        ids = [rng.randrange(100, 40000) for _ in range(prompt)]
        for k in range(4):
            turn = Turn(
                [rng.randrange(100, 40000) for _ in range(reply)],
                [-rng.uniform(0.5, 6.0) for _ in range(reply)],
                0,
            )
            out.append(Episode(f"t{g}", f"{seed}-{g}", ids, [turn], reward=float(k % 2)))
    return out


def model_sizes(model) -> dict:
    """Bytes of the state and of the largest FSDP unit, from this rank's sharded model (global
    shapes): a unit is a decoder layer, or the root (everything else: embedding, head, norm)."""

    def nbytes(params) -> int:
        return sum(p.numel() * p.element_size() for p in params)

    lm = model.inner.lm
    names = set(getattr(lm, "_no_split_modules", None) or ())
    layers = [
        m
        for m in lm.modules()  # fully_shard subclasses them (FSDPLlamaDecoderLayer)
        if any(c.__name__ in names for c in type(m).__mro__)
    ]
    weights = nbytes(lm.parameters())
    trainable = nbytes(model.trainable_parameters())
    reference = 0
    if getattr(model, "reference", None) is not None:
        reference = nbytes(model.reference.parameters())
    layer = max(nbytes(m.parameters()) for m in layers)
    root = weights - sum(nbytes(m.parameters()) for m in layers)
    return {
        "weights": weights,
        "trainable": trainable,
        "reference": reference,
        "state": weights + 3 * trainable + reference,  # + gradients + 2 AdamW moments
        "largest_layer_unit": layer,
        "root_unit": root,
        "largest_unit": max(layer, root),
    }


def rank_main(
    rank: int, world: int, port: int, row: dict, model_dir: str, out: str, min_free: float
) -> None:
    phase, opened = ["imports"], []
    watch_weight_files(opened, phase)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        OMP_NUM_THREADS="1",
    )
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    import peft  # noqa: F401
    import transformers  # noqa: F401  (imported here: its RSS is part of the baseline)

    from practicum.config import load_config
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    baseline = rss_kb("VmRSS") * 1024
    cfg = load_config(
        None,
        [
            f"model.model={model_dir}",
            "model.device=cpu",
            f"model.lora={str(row['lora']).lower()}",
            "algo.kl_coef=0",
            "train.epochs=1",
            "train.mini_batches=1",
            "train.micro_batch_size=2",
            "train.lr=1e-5",
            "train.warmup_steps=0",
        ],
    )
    init_ranks("cpu", timeout_s=3600)
    result = {"rank": rank, "baseline_rss": baseline, "phases": {}}
    state: dict = {}
    report = Path(out) / f"rank-{rank}.json"

    def run(name: str, fn) -> None:
        dist.barrier()
        phase[0] = name
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        start = time.perf_counter()
        fn()
        peak = rss_kb("VmHWM") * 1024
        result["phases"][name] = {
            "peak_above_imports": peak - baseline,
            "rss_after": rss_kb("VmRSS") * 1024 - baseline,
            "seconds": time.perf_counter() - start,
        }
        report.write_text(json.dumps({**result, "opened": opened}))
        dist.barrier()
        phase[0] = "between"

    run("init", lambda: state.update(learner=sharded_learner(cfg, policy_config(cfg))))
    learner = state["learner"]
    if rank == 0:
        result["sizes"] = model_sizes(learner.model)
    try:  # this checkout: the driver builds the rows; git main before it: episodes
        from practicum.batch import rl_batch_of

        step_input = rl_batch_of(batch(0), cfg)
    except ImportError:
        step_input = batch(0)
    run("step", lambda: learner.train_step(step_input))
    policy = Path(out) / "policy"
    run("save_policy", lambda: learner.save_policy(policy))
    run("load_policy", lambda: learner.model.load_weights(policy))
    ckpt_root = Path(out) / "checkpoints"
    run("save", lambda: state.update(ckpt=learner.save(ckpt_root, {"bench": True})))
    # today's checkpoints load trainer.pt whole on every rank: skip when that cannot fit
    trainer = state["ckpt"] / "trainer.pt"
    need = world * trainer.stat().st_size if trainer.is_file() else 0
    decision = [need <= mem_available() - min_free * GIB if rank == 0 else None]
    dist.broadcast_object_list(decision, src=0)
    if decision[0]:
        run("resume", lambda: learner.load(state["ckpt"]))
    else:
        result["skipped"] = {
            "resume": f"each rank would load trainer.pt whole ({need / GIB:.1f} GiB in all)"
        }
    report.write_text(json.dumps({**result, "opened": opened}))
    dist.barrier()
    dist.destroy_process_group()


def worker(args) -> None:
    """One row: WORLD rank processes, stopped together when one fails or the machine's available
    memory runs low; each rank's JSON lands in `args.out`."""
    import multiprocessing as mp

    sys.path.insert(0, args.src)
    row = json.loads(args.row)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=rank_main,
            args=(r, WORLD, port, row, args.model_dir, args.out, args.min_available_gb),
        )
        for r in range(WORLD)
    ]
    for p in procs:
        p.start()
    status, low = "ok", mem_available()
    deadline = time.monotonic() + args.timeout
    while any(p.is_alive() for p in procs):
        low = min(low, mem_available())
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        if low < args.min_available_gb * GIB or failed or time.monotonic() > deadline:
            status = (
                "stopped: machine memory low"
                if low < args.min_available_gb * GIB
                else "stopped: a rank failed"
                if failed
                else "stopped: timeout"
            )
            for p in procs:
                p.kill()
            break
        time.sleep(0.05)
    for p in procs:
        p.join()
    if status == "ok" and any(p.exitcode for p in procs):
        status = "stopped: a rank failed"
    Path(args.out, "worker.json").write_text(
        json.dumps(
            {"status": status, "min_mem_available": low, "exitcodes": [p.exitcode for p in procs]}
        )
    )


# -- the driver --------------------------------------------------------------------------------
def run_row(name: str, row: dict, model_dir: Path, src: Path, tmp: Path, args) -> dict:
    out = tmp / f"row-{name}"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{src}:{HERE}", "HF_HUB_OFFLINE": "1"}
    if not args.glibc_default:
        env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            "--row",
            json.dumps(row),
            "--model-dir",
            str(model_dir),
            "--out",
            str(out),
            "--src",
            str(src),
            "--min-available-gb",
            str(args.min_available_gb),
            "--timeout",
            str(args.timeout),
        ],
        env=env,
        check=True,
    )
    ranks = [json.loads(f.read_text()) for f in sorted(out.glob("rank-*.json"))]
    result = {
        "row": name,
        **row,
        "ranks": ranks,
        "wall_s": time.perf_counter() - start,
        **json.loads((out / "worker.json").read_text()),
        "load_avg_1min_before": load_before,
        "load_avg_1min_after": os.getloadavg()[0],
    }
    shutil.rmtree(out, ignore_errors=True)
    return result


def sizes_of(result: dict, results: list[dict]) -> dict | None:
    """The state and unit sizes a row measured, or those of a row of the same model and kind
    (the same weights, so the same budget) when it was stopped before measuring them."""
    for res in [result, *results]:
        if res["model"] == result["model"] and res["lora"] == result["lora"]:
            found = next((r["sizes"] for r in res["ranks"] if "sizes" in r), None)
            if found:
                return found
    return None


def judge(result: dict, sizes: dict | None) -> list[dict]:
    """Per phase: the largest rank peak, the sum of peaks, their budgets, and which ranks
    other than 0 touched a weight file."""
    out = []
    for phase in PHASES:
        peaks = [
            r["phases"][phase]["peak_above_imports"]
            for r in result["ranks"]
            if phase in r["phases"]
        ]
        if len(peaks) < WORLD:
            out.append({"phase": phase, "measured": False})
            continue
        entry = {
            "phase": phase,
            "measured": True,
            "max_rank_peak": max(peaks),
            "sum_of_peaks": sum(peaks),
            "seconds": max(r["phases"][phase]["seconds"] for r in result["ranks"]),
            "other_ranks_opening_weights": sorted(
                {
                    r["rank"]
                    for r in result["ranks"]
                    for p, _, _ in r["opened"]
                    if p == phase and r["rank"] != 0
                }
            ),
        }
        if sizes:
            unit, state = sizes["largest_unit"], sizes["state"]
            if phase == "init":  # no gradient or AdamW moment exists yet
                state = sizes["weights"] + sizes["reference"]
            entry["rank_budget"] = 1.1 * (state / WORLD + 2 * unit)
            entry["sum_budget"] = state + WORLD * 2 * unit
            entry["within_budget"] = (
                entry["max_rank_peak"] <= entry["rank_budget"]
                and entry["sum_of_peaks"] <= entry["sum_budget"]
            )
        out.append(entry)
    return out


def table(results: list[dict]) -> str:
    lines = [
        "| row | code | phase | max rank peak GB (budget) | sum of peaks GB (budget) | "
        "within | s | ranks != 0 opening weight files | load 1-min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        load = f"{res['load_avg_1min_before']:.1f} / {res['load_avg_1min_after']:.1f}"
        for e in res["judged"]:
            if not e["measured"]:
                skipped = {k: v for r in res["ranks"] for k, v in r.get("skipped", {}).items()}
                why = skipped.get(e["phase"]) or res["status"]
                lines.append(
                    f"| {res['row']} | {res['code_rev']} | {e['phase']} | not run: "
                    f"{why} | | | | | {load} |"
                )
                continue
            budget = f" ({e['rank_budget'] / 1e9:.2f})" if "rank_budget" in e else ""
            total = f" ({e['sum_budget'] / 1e9:.2f})" if "sum_budget" in e else ""
            lines.append(
                f"| {res['row']} | {res['code_rev']} | {e['phase']} | "
                f"{e['max_rank_peak'] / 1e9:.2f}{budget} | {e['sum_of_peaks'] / 1e9:.2f}{total} | "
                f"{'yes' if e.get('within_budget') else 'no' if 'within_budget' in e else '?'} | "
                f"{e['seconds']:.0f} | {e['other_ranks_opening_weights'] or 'none'} | {load} |"
            )
    return "\n".join(lines)


def run_rows(rows: dict, args) -> list[dict]:
    """Write the models the rows need, run each row, return their results."""
    from _machine import machine_state

    models = sorted({r["model"] for r in rows.values()})
    params = {"0.5b": 0.5e9, "1b": 1.25e9, "tiny": 3.2e6}
    # bf16 files, and a checkpoint of up to 16 bytes a parameter (fp32 weights + AdamW)
    need = sum(2 * params[m] for m in models) + 16 * max(params[m] for m in models) + 2 * GIB
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < need:
        sys.exit(
            f"sharded_memory: {free / GIB:.0f} GiB free in {tempfile.gettempdir()}, "
            f"{need / GIB:.0f} GiB needed"
        )
    results = []
    with tempfile.TemporaryDirectory(prefix="sharded-memory-") as tmp:
        tmp = Path(tmp)
        sys.path.insert(0, str(REPO / "src"))
        counts = {m: write_random_llama(tmp / f"llama-{m}", MODELS[m]) for m in models}
        for name, row in rows.items():
            src, rev = REPO / "src", "this checkout"
            if row["code"] == "main":
                src, rev = tmp / f"code-{args.main}", args.main
                src.mkdir()
                archive = subprocess.run(
                    ["git", "-C", str(REPO), "archive", args.main, "src/practicum"],
                    check=True,
                    capture_output=True,
                )
                subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
                src = src / "src"
            print(f"{name}: running ({rev}) ...", flush=True)
            state = machine_state()
            res = run_row(name, row, tmp / f"llama-{row['model']}", src, tmp, args)
            res.update(
                machine_before=state,
                code_rev=rev,
                params=counts[row["model"]],
                malloc_mmap_threshold=None if args.glibc_default else 1 << 20,
            )
            res["judged"] = judge(res, sizes_of(res, []))
            results.append(res)
            print(table([res]), flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rows", default=",".join(DEFAULT_ROWS), help=f"comma-separated, of {list(ROWS)}"
    )
    ap.add_argument("--main", default="743cb4e", help="the git revision of the 'main' rows")
    ap.add_argument(
        "--min-available-gb",
        type=float,
        default=3.0,
        help="stop a run when the machine's MemAvailable falls below this",
    )
    ap.add_argument("--timeout", type=float, default=5400.0, help="seconds per row")
    ap.add_argument("--output", default="sharded_memory", help="results file stem")
    ap.add_argument(
        "--glibc-default",
        action="store_true",
        help="leave glibc's malloc thresholds as they are (module doc)",
    )
    ap.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: rebuild the table from the results file",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    from _machine import machine_state

    names = [] if args.table_only else args.rows.split(",")
    rows = {n: ROWS[n] for n in names}
    path = OUT / f"{args.output}.json"
    before = json.loads(path.read_text()) if path.is_file() else {}
    machine = machine_state() if rows else before.get("machine", {})
    results = run_rows(rows, args) if rows else []
    OUT.mkdir(exist_ok=True)
    # rows run now replace those of the same name; the others stay as they were measured
    kept = before.get("results", [])
    results = [r for r in kept if r["row"] not in rows] + results
    results.sort(key=lambda r: list(ROWS).index(r["row"]))
    for res in results:
        res["judged"] = judge(res, sizes_of(res, results))
    payload = {
        "benchmark": "sharded_memory",
        "world": WORLD,
        "backend": "gloo",
        "models": {
            m: {**MODELS[m], "file_dtype": "bfloat16"}
            for m in MODELS
            if any(r["model"] == m for r in results)
        },
        "budget": "rank peak above imports <= 1.1 (state / N + 2 largest unit); "
        "sum <= state + N (2 largest unit); state: the weights (+ reference) "
        "at init, + gradients + AdamW moments from the step on",
        "machine": machine,
        "load_avg_1min_after": os.getloadavg()[0],
        "results": results,
    }
    path.write_text(json.dumps(payload, indent=1))
    text = table(results)
    (OUT / f"{args.output}.md").write_text(
        f"# sharded_memory ({WORLD} gloo ranks, CPU: {machine.get('cpu', '?')}, "
        f"{machine.get('cpus')} cores, avx512_bf16={machine.get('avx512_bf16')})\n\n"
        "Peaks are RSS above each rank's RSS after imports; budgets in brackets (module doc of "
        'benchmarks/sharded_memory.py). "stopped: machine memory low": the row was stopped '
        f"when the machine's available memory fell under the floor (other processes share it). "
        "Load: the 1-minute load average before / after the row.\n\n"
        f"{text}\n"
    )
    print(text)


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: work folders and rank processes go
    sys.path.insert(0, str(HERE))
    main()
