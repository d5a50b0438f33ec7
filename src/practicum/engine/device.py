"""Where and in what precision the policy runs: dtype choice and CPU thread count."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import torch


def auto_dtype(device: torch.device, lora: bool = True, sampler: bool = False) -> torch.dtype:
    """bf16 where the hardware computes it natively and LoRA is on, else fp32.

    `sampler`: the dtype of a sampler holding weights of its own (vLLM, an HF copy). On a GPU
    with native bf16 it samples in bf16 for full fine-tuning too, while the learner keeps fp32
    master weights and each published version is cast on the way: half the bytes per sync
    and of the sampler's weights, and the precision the anchors sample in (prime-rl, SkyRL,
    verl). On CPU full fine-tuning stays fp32 on both sides."""
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
        return torch.bfloat16 if native and (lora or sampler) else torch.float32
    if not lora:
        return torch.float32
    return torch.bfloat16 if _cpu_has_bf16() and cpu_bf16_is_faster() else torch.float32


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


# The shapes timed by `cpu_bf16_is_faster`: a small model's projection (SmolLM2-135M's MLP) at
# a decoding batch and at a learner micro-batch, the two products the main job spends its time on.
_PROBE_IN, _PROBE_OUT = 576, 1536
_PROBE_DECODE_ROWS, _PROBE_TRAIN_ROWS = 16, 1024
_PROBED = {"bfloat16": torch.bfloat16, "float32": torch.float32}


@functools.cache
def cpu_bf16_is_faster() -> bool:
    """Whether bf16 beats fp32 on this CPU: measured once per machine, then read from
    `cpu_dtype.json` beside the converted models (keyed by CPU, flags, torch and threads).

    Native bf16 is not always faster: CPUs of one family differ, and on some the bf16
    kernels lose to fp32 at these shapes. Each dtype runs a decoding product and a learner
    product (forward and the input's gradient, as under a frozen LoRA base); the faster total
    wins."""
    from practicum.engine.models import default_cache_dir

    path = default_cache_dir() / "cpu_dtype.json"
    key = _cpu_key()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    entry = known.get(key)
    if not isinstance(entry, dict) or "bfloat16_s" not in entry or "float32_s" not in entry:
        entry = {f"{name}_s": round(_probe_seconds(dt), 6) for name, dt in _PROBED.items()}
        known[key] = entry
        _write_atomic(path, json.dumps(known, indent=1))
    return entry["bfloat16_s"] < entry["float32_s"]


def _cpu_key() -> str:
    """This CPU and what computes on it: model name, a digest of its flags, torch, threads."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            info.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    model = info.get("model name") or platform.processor() or platform.machine()
    flags = info.get("flags", "")
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    kernels = torch.backends.cpu.get_cpu_capability()
    return (
        f"{model} | flags {digest} | {kernels} kernels | torch {torch.__version__}"
        f" | threads {torch.get_num_threads()}"
    )


def _probe_seconds(dtype: torch.dtype, repeats: int = 5) -> float:
    """Best of `repeats` of one decoding product (16 steps) and one learner product."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(_PROBE_OUT, _PROBE_IN, generator=gen).to(dtype)
    token = torch.randn(_PROBE_DECODE_ROWS, _PROBE_IN, generator=gen).to(dtype)
    rows = torch.randn(_PROBE_TRAIN_ROWS, _PROBE_IN, generator=gen).to(dtype).requires_grad_()
    best = float("inf")
    for _ in range(repeats + 1):  # the first run warms the kernels up
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(16):
                torch.nn.functional.linear(token, weight)
        out = torch.nn.functional.linear(rows, weight)
        out.sum().backward()
        rows.grad = None
        best = min(best, time.perf_counter() - t0)
    return best


def _write_atomic(path: Path, text: str) -> None:
    """Replace `path` whole (concurrent processes each write a complete file); a read-only
    cache only costs measuring again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass


def configure_threads() -> None:
    """Use as many torch threads as CPUs this process may run on, unless the user chose.

    torch defaults to the machine's physical cores, ignoring CPU affinity and cgroup quotas,
    which oversubscribes containers. OMP_NUM_THREADS / MKL_NUM_THREADS mean the user chose.
    """
    if "OMP_NUM_THREADS" in os.environ or "MKL_NUM_THREADS" in os.environ:
        return
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_cpu_quota()
    if quota:
        n = min(n, max(1, int(quota)))
    if torch.get_num_threads() > n:
        torch.set_num_threads(n)


def _cgroup_cpu_quota() -> float | None:
    """CPUs allowed by the cgroup (v2 cpu.max or v1 cfs quota), None when unlimited/unknown."""
    try:
        v2 = Path("/sys/fs/cgroup/cpu.max")
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        q = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        if q.is_file():
            quota_us = int(q.read_text())
            period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
            return None if quota_us <= 0 else quota_us / period
    except (OSError, ValueError):
        pass
    return None
