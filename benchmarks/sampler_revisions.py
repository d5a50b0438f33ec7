"""The HF sampler at two git revisions, side by side: seconds per generate call and the speedup.

For a change to the sampling loop, a before/after pair measured in separate runs on a shared
2-core machine says little; here both revisions run at once, each in its own process (the old
one from `git archive` of --base, the new one from this checkout's src/), and take turns call by
call (alternating which goes first), so a change in machine load hits both. Each call samples
--new-tokens tokens per row for a batch of the same chat prompt (a GRPO group), LoRA merged,
eos suppressed so every row runs the full length, per-row seeds.

    python benchmarks/sampler_revisions.py --base HEAD~1            # batches 1, 8, 32
    python benchmarks/sampler_revisions.py --base main --batches 8 --repeats 2 --threads 1

Writes benchmarks/results/sampler_revisions.json (medians, every call's seconds, the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from _machine import machine_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "sampler_revisions.json"

WORKER = r"""
import json, sys, time
import practicum
from practicum.engine.base import SamplingParams
from practicum.engine.hf import PolicyConfig, load_hf_engine

settings = json.loads(sys.argv[1])
trainable, sampler = load_hf_engine(PolicyConfig(model=settings["model"], lora=True))
sampler.eos_ids = set()
prompt = list(trainable.tokenizer.apply_chat_template(
    [{"role": "user", "content": "What is 37 * 24? Reply with the number only."}],
    add_generation_prompt=True, tokenize=True, return_dict=False))
params = SamplingParams(temperature=1.0, max_new_tokens=settings["new_tokens"])
sampler.generate([prompt] * 2, params, seeds=[0, 1])  # warm-up
print(json.dumps({"ready": practicum.__file__}), flush=True)
for line in sys.stdin:
    batch = int(line)
    t0 = time.perf_counter()
    sampler.generate([prompt] * batch, params, seeds=list(range(batch)))
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
"""


def export_src(rev: str, into: Path) -> Path:
    """src/ of git revision `rev`, unpacked under `into`."""
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into / "src"


class Worker:
    """A sampler process over one src/ tree, one generate call per request."""

    def __init__(self, src: Path, args):
        env = dict(
            os.environ,
            PYTHONPATH=str(src),
            HF_HUB_OFFLINE="1",
            OMP_NUM_THREADS=str(args.threads),
            MKL_NUM_THREADS=str(args.threads),
        )
        settings = {"model": args.model, "new_tokens": args.new_tokens}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.loaded_from = self._read()["ready"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the sampler process ended (exit {self.proc.wait()})")
        return json.loads(line)

    def generate(self, batch: int) -> float:
        self.proc.stdin.write(f"{batch}\n")
        self.proc.stdin.flush()
        return self._read()["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD~1", help="git revision to compare against")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per batch and side")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    state = machine_state()
    base_rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.base],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    head_rev = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {
            "base": Worker(export_src(args.base, Path(tmp)), args),
            "this": Worker(ROOT / "src", args),
        }
        seconds: dict[str, dict[int, list[float]]] = {
            k: {b: [] for b in args.batches} for k in sides
        }
        for rep in range(args.repeats):
            for batch in args.batches:
                for name in ("base", "this") if rep % 2 == 0 else ("this", "base"):
                    seconds[name][batch].append(sides[name].generate(batch))
            print(f"repeat {rep + 1}/{args.repeats} done", file=sys.stderr)
        for w in sides.values():
            w.close()

    rows = []
    for batch in args.batches:
        base, this = (statistics.median(seconds[k][batch]) for k in ("base", "this"))
        rows.append(
            {
                "batch": batch,
                "base_seconds": base,
                "this_seconds": this,
                "speedup": base / this,
                "this_tok_per_s": batch * args.new_tokens / this,
            }
        )
    table = Table(
        title=f"HF sampler, {args.new_tokens} new tokens per row, LoRA merged, "
        f"{args.threads} threads: {base_rev} vs {head_rev}"
    )
    for col in ("batch", f"{base_rev} s", f"{head_rev} s", "speedup", f"{head_rev} tok/s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["batch"]),
            f"{r['base_seconds']:.2f}",
            f"{r['this_seconds']:.2f}",
            f"{r['speedup']:.2f}x",
            f"{r['this_tok_per_s']:.1f}",
        )
    Console().print(table)
    state["load_avg_1min_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "machine": state,
                "base": base_rev,
                "this": head_rev,
                "rows": rows,
                "seconds": {k: {str(b): v for b, v in d.items()} for k, d in seconds.items()},
                "settings": {
                    k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                },
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
