"""`practicum serve` through the official openai client: latency of one chat request and the
throughput of concurrent ones (batched by the generation server), policy and base.

SmolLM2-135M-Instruct with a fresh LoRA checkpoint (fp32 on CPUs without AVX-512), greedy, a
budget of `--tokens` tokens per reply (a reply may end earlier at its end-of-turn token;
tokens/s counts the tokens returned).

    python benchmarks/serve_throughput.py [--tokens 32] [--concurrency 1 4 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import practicum  # noqa: F401,E402  (sets HF_HUB_OFFLINE)
from _machine import machine_state  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from openai import OpenAI

    from practicum.engine.models import resolve_model
    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served
    from serve.conftest import save_run

    state = machine_state()
    run = save_run(resolve_model("smollm2-135m-instruct"),
                   Path(tempfile.mkdtemp()) / "smol", std=0.002, dtype="auto")
    t0 = time.perf_counter()
    served = load_served(run)
    load_s = time.perf_counter() - t0
    rows = []
    with ServerThread(build_app(served)) as url:
        client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)

        def ask(model: str, i: int, out: list) -> None:
            t = time.perf_counter()
            r = client.chat.completions.create(
                model=model, temperature=0, max_tokens=args.tokens,
                messages=[{"role": "user", "content": f"Write a story about the number {i}."}])
            out.append((time.perf_counter() - t, r.usage.completion_tokens))

        ask("smol", 0, [])  # warm-up
        for model in ("smol", "smol-base"):
            for c in args.concurrency:
                for _ in range(args.repeats):
                    out: list = []
                    threads = [threading.Thread(target=ask, args=(model, i, out))
                               for i in range(c)]
                    start = time.perf_counter()
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    wall = time.perf_counter() - start
                    tokens = sum(n for _, n in out)
                    rows.append({"model": model, "concurrency": c, "wall_s": wall,
                                 "tokens": tokens, "tokens_per_s": tokens / wall,
                                 "mean_latency_s": sum(s for s, _ in out) / len(out)})
    served.close()
    table = Table(title=f"practicum serve, openai client, {args.tokens} tokens per reply "
                  f"(model load {load_s:.1f} s)")
    for col in ("model", "concurrent", "tokens", "wall s", "tokens/s", "mean latency s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["model"], str(r["concurrency"]), str(r["tokens"]), f"{r['wall_s']:.2f}",
                      f"{r['tokens_per_s']:.1f}", f"{r['mean_latency_s']:.2f}")
    Console().print(table)
    out = Path(__file__).parent / "results" / "serve_throughput.json"
    out.write_text(json.dumps({"machine": state, "tokens": args.tokens, "load_s": load_s,
                               "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
