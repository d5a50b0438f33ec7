"""Where and in what precision the policy runs: dtype choice and CPU thread count."""

from __future__ import annotations

import os
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
    return torch.bfloat16 if _cpu_has_bf16() else torch.float32


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


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
