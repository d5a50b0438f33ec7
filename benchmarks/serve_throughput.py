"""`practicum serve` through the official openai client: a short request's latency alone and
beside a long one (continuous batching), and tokens/s at several concurrent clients.

SmolLM2-135M-Instruct with a fresh LoRA checkpoint (bf16 where the CPU computes it natively,
else fp32), greedy. Latency: a chat reply of `--short` tokens, alone and while a streamed
completion of `--long` tokens runs (the long one must still be running when the short one
ends). Throughput: `c` clients at once, each a chat reply of up to `--tokens` tokens (a reply
may end earlier at its end-of-turn token; tokens/s counts the tokens returned).

    python benchmarks/serve_throughput.py [--concurrency 1 8 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _machine import machine_state  # noqa: E402

import practicum  # noqa: F401,E402  (sets HF_HUB_OFFLINE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=32, help="reply budget, throughput rows")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--short", type=int, default=4, help="tokens of the short request")
    ap.add_argument("--long", type=int, default=250, help="tokens of the long request")
    ap.add_argument("--repeats", type=int, default=5, help="short requests per latency row")
    args = ap.parse_args()
    import shutil

    from openai import OpenAI
    from serve.conftest import save_run

    from practicum.engine.models import resolve_model
    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served

    state = machine_state()
    scratch = Path(tempfile.mkdtemp(prefix="serve_bench_"))
    run = save_run(
        resolve_model("smollm2-135m-instruct"), scratch / "smol", std=0.002, dtype="auto"
    )
    t0 = time.perf_counter()
    served = load_served(run)
    load_s = time.perf_counter() - t0
    try:
        with ServerThread(build_app(served)) as url:
            client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
            latency = measure_latency(client, served, args)
            rows = measure_throughput(client, args)
    finally:
        served.close()
        shutil.rmtree(scratch, ignore_errors=True)
    report(latency, rows, load_s, state, args)


def short(client, n: int) -> float:
    t = time.perf_counter()
    r = client.chat.completions.create(
        model="smol",
        temperature=0,
        max_tokens=n,
        messages=[{"role": "user", "content": "Name a colour."}],
    )
    assert r.usage.completion_tokens <= n
    return time.perf_counter() - t


def measure_latency(client, served, args) -> dict:
    short(client, args.short)  # warm-up
    alone = [short(client, args.short) for _ in range(args.repeats)]
    beside, long_tokens = [], []
    for _ in range(args.repeats):
        started, done = threading.Event(), threading.Event()
        count = [0]

        def long_request(count: list, started: threading.Event, done: threading.Event) -> None:
            for chunk in client.completions.create(
                model="smol",
                prompt="Once upon a time, in a land far away,",
                temperature=0,
                max_tokens=args.long,
                stream=True,
            ):
                if chunk.choices and chunk.choices[0].text:
                    count[0] += 1
                    if count[0] == 3:
                        started.set()
            done.set()

        runner = threading.Thread(target=long_request, args=(count, started, done))
        runner.start()
        started.wait(600)
        seconds = short(client, args.short)
        if not done.is_set():  # only a short request that ran beside the long one counts
            beside.append(seconds)
        runner.join()
        long_tokens.append(count[0])
    return {
        "short_tokens": args.short,
        "long_budget": args.long,
        "long_chunks": long_tokens,
        "alone_s": alone,
        "beside_long_s": beside,
        "alone_median_s": statistics.median(alone),
        "beside_median_s": statistics.median(beside) if beside else None,
    }


def measure_throughput(client, args) -> list[dict]:
    rows = []
    for c in args.concurrency:
        out: list = []

        def ask(i: int, out: list) -> None:
            t = time.perf_counter()
            r = client.chat.completions.create(
                model="smol",
                temperature=0,
                max_tokens=args.tokens,
                messages=[{"role": "user", "content": f"Write a story about the number {i}."}],
            )
            out.append((time.perf_counter() - t, r.usage.completion_tokens))

        threads = [threading.Thread(target=ask, args=(i, out)) for i in range(c)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        tokens = sum(n for _, n in out)
        rows.append(
            {
                "concurrency": c,
                "wall_s": wall,
                "tokens": tokens,
                "tokens_per_s": tokens / wall,
                "mean_latency_s": statistics.mean(s for s, _ in out),
            }
        )
    return rows


def report(latency: dict, rows: list[dict], load_s: float, state: dict, args) -> None:
    console = Console()
    lat = Table(title=f"short request ({args.short} tokens) latency, median of {args.repeats}")
    for col in ("alone s", f"beside a {args.long}-token request s", "ratio"):
        lat.add_column(col, justify="right")
    beside = latency["beside_median_s"]
    lat.add_row(
        f"{latency['alone_median_s']:.2f}",
        f"{beside:.2f}" if beside is not None else "n/a",
        f"{beside / latency['alone_median_s']:.2f}x" if beside is not None else "n/a",
    )
    console.print(lat)
    table = Table(
        title=f"throughput, chat replies of up to {args.tokens} tokens (model load {load_s:.1f} s)"
    )
    for col in ("concurrent", "tokens", "wall s", "tokens/s", "mean latency s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["concurrency"]),
            str(r["tokens"]),
            f"{r['wall_s']:.2f}",
            f"{r['tokens_per_s']:.1f}",
            f"{r['mean_latency_s']:.2f}",
        )
    console.print(table)
    console.print(f"machine: {state}")
    out = Path(__file__).parent / "results" / "serve_throughput.json"
    out.write_text(
        json.dumps(
            {
                "machine": state,
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "model": "smollm2-135m-instruct + LoRA checkpoint",
                "load_s": load_s,
                "latency": latency,
                "throughput_tokens": args.tokens,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
