"""What the machine was doing while a benchmark ran: timings on a busy CPU are not comparable.

Two cores shared with another training process run small matmuls 10-100x slower (OpenMP
threads spin on oversubscribed cores), so every benchmark checks the CPU is idle first and
records the state in its JSON.
"""

from __future__ import annotations

import os
import sys
import time


def cpu_busy_fraction(seconds: float = 1.0) -> float:
    """Fraction of all CPU time spent busy (not idle/iowait) over `seconds`, from /proc/stat."""

    def snapshot() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return idle, sum(fields)

    idle0, total0 = snapshot()
    time.sleep(seconds)
    idle1, total1 = snapshot()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def cpu_model() -> dict:
    """CPU name and whether it has AVX-512 (bf16 matmuls are fast only with it): numbers from
    machines with and without it differ by a large factor."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return {}
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if line.startswith("model name")
        ),
        "",
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    return {"cpu": name, "avx512": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags}


def machine_state(busy_limit: float = 0.25) -> dict:
    """CPU model, busy fraction and load average now; warns on stderr when the CPU is not
    idle."""
    try:
        busy = cpu_busy_fraction()
    except OSError:  # no /proc (macOS): report the load average only
        busy = float("nan")
    state = {
        "cpus": os.cpu_count(),
        **cpu_model(),
        "busy_before": busy,
        "load_avg_1min": os.getloadavg()[0],
    }
    if busy > busy_limit:
        print(
            f"WARNING: the CPU is {busy:.0%} busy before the benchmark starts; other processes "
            "will distort these timings. Run benchmarks on an idle machine.",
            file=sys.stderr,
        )
    return state
