"""Publishing full weights from 4 sharded ranks (gloo, CPU) to a sampler's receiver: the
streamed path (`engine.weight_sync: broadcast` with a sharded learner: every rank gathers one
tensor at a time, rank 0 sends it in buckets, `practicum.engine.weight_stream`) against the
gathered one it replaces (rank 0 gathers the whole state on its CPU, `export_weights`, then
sends it over the same weight group, as the vLLM sampler's broadcast did), and the streamed
path with the ipc transport (`engine.weight_transport: ipc`: each bucket shared in place
through a file in /dev/shm, only control messages over gloo, `practicum.engine.weight_ipc`).

The receiver is a bare gloo member holding the model's tensors in the sampler's dtype (what an
HF copy or a vLLM worker holds) and copying each arriving tensor into them
(`weight_stream.receive_into`). Per path: the seconds of a publish on rank 0 (median of
`--repeats`), each rank's and the receiver's peak RSS above its RSS just before the publish
(Linux VmHWM reset through /proc/self/clear_refs; after one streamed publish that is not
counted, so that gloo's buffers and the receiver's pages exist already), against the bound the
streamed path is built to:

    each rank:   peak above pre-publish <= largest unsharded tensor (sampler dtype) + 2 buckets

The ranks run with MALLOC_MMAP_THRESHOLD_ at 1 MiB, so RSS follows the tensors alive (see
benchmarks/sharded_memory.py). Used by benchmarks/weight_sync.py --sharded MODEL.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIB = 2**20
WORLD = 4


def _rss(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    return _rss("VmRSS")


def process_main(index: int, model_dir: str, targets: dict, repeats: int, out: str) -> None:
    """Ranks 0..WORLD-1 (index) load the sharded learner and publish; index WORLD receives."""
    os.environ.update(
        RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1"
    )
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from practicum.config import load_config
    from practicum.engine.hf_trainable import distinct_tensors
    from practicum.engine.weight_group import meta_of
    from practicum.engine.weight_stream import (
        Membership,
        WeightTarget,
        receive_into,
        send_stream,
    )
    from practicum.learner.sharded import init_ranks, sharded_learner
    from practicum.runtime.placement import policy_config

    tgt = WeightTarget(**targets["collective"])
    ipc = WeightTarget(**targets["ipc"])
    # a formation per path: a group formed again under a prefix already used would read the
    # old members' addresses from the store
    tgt_gathered = WeightTarget(**targets["gathered"])
    member = Membership()
    report: dict = {"index": index, "paths": {}}
    paths = ("streamed", "streamed-ipc", "gathered")
    if index == WORLD:  # the receiver: the model's tensors in the sampler's dtype, then copies
        from transformers import AutoConfig, AutoModelForCausalLM

        with torch.device("meta"):
            lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
        state = {
            k: torch.zeros(v.shape, dtype=tgt.torch_dtype)  # touched: resident
            for k, v in distinct_tensors(lm.state_dict(keep_vars=True))[0].items()
        }
        for path in ("warm-up", *paths):
            peaks = []
            for _ in range(1 if path == "warm-up" else repeats):
                before = _reset_peak()
                which = {"streamed-ipc": ipc, "gathered": tgt_gathered}.get(path, tgt)
                got = receive_into(state, member.of(which, 1).receive_stream())
                peaks.append(_rss("VmHWM") - before)
                assert got == set(state), "a tensor did not arrive"
            report["paths"][path] = {"peak_above_before": max(peaks)}
        member.close()
        Path(out, "receiver.json").write_text(json.dumps(report))
        return
    cfg = load_config(
        None,
        [
            f"model.model={model_dir}",
            "model.device=cpu",
            "model.dtype=float32",
            "model.lora=false",
            "algo.kl_coef=0",
        ],
    )
    init_ranks("cpu", timeout_s=3600)
    learner = sharded_learner(cfg, policy_config(cfg))
    model = learner.model
    if index == 0:
        full = distinct_tensors(model.inner.trainable_state())[0]
        report["largest_tensor_bytes"] = (
            max(t.numel() for t in full.values()) * tgt.torch_dtype.itemsize
        )
        report["model_bytes"] = sum(t.numel() for t in full.values()) * tgt.torch_dtype.itemsize

    def gathered() -> None:  # today's: the whole state on rank 0's CPU, then sent
        update = model.export_weights(0)
        if index == 0:
            tensors = distinct_tensors(update.tensors)[0]
            send_stream(
                tgt_gathered, meta_of(tensors, tgt.torch_dtype), iter(tensors.items()), member
            )

    streamed = lambda: model.stream_weights(tgt, member)  # noqa: E731
    streamed_ipc = lambda: model.stream_weights(ipc, member)  # noqa: E731
    for path, publish in (
        ("warm-up", streamed),
        ("streamed", streamed),
        ("streamed-ipc", streamed_ipc),
        ("gathered", gathered),
    ):
        seconds, peaks = [], []
        for _ in range(1 if path == "warm-up" else repeats):
            dist.barrier()
            before = _reset_peak()
            start = time.perf_counter()
            publish()
            seconds.append(time.perf_counter() - start)
            peaks.append(_rss("VmHWM") - before)
        report["paths"][path] = {
            "seconds": statistics.median(seconds),
            "peak_above_before": max(peaks),
        }
    member.close()
    Path(out, f"rank-{index}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


def measure(model_dir: Path, bucket_mb: float, repeats: int = 2, timeout_s: float = 3600) -> dict:
    """Both paths from WORLD ranks to one receiver (module doc): per path, rank 0's seconds,
    every rank's and the receiver's peak RSS above pre-publish, and the bound."""
    from practicum.engine.weight_stream import WeightRendezvous

    rendezvous = WeightRendezvous(timeout_s=timeout_s)
    targets = {
        "collective": rendezvous.target(2, "gloo", "float32", bucket_mb).__dict__,
        "ipc": rendezvous.target(2, "gloo", "float32", bucket_mb, transport="ipc").__dict__,
        "gathered": rendezvous.target(2, "gloo", "float32", bucket_mb).__dict__,
    }
    with tempfile.TemporaryDirectory(prefix="practicum-publish-") as out:
        env = {
            **os.environ,
            "MALLOC_MMAP_THRESHOLD_": str(1 << 20),
            "HF_HUB_OFFLINE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
        }
        load_before = os.getloadavg()[0]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    str(i),
                    str(model_dir),
                    json.dumps(targets),
                    str(repeats),
                    out,
                ],
                env=env,
            )
            for i in range(WORLD + 1)
        ]
        deadline = time.monotonic() + timeout_s
        try:
            for p in procs:
                p.wait(max(1.0, deadline - time.monotonic()))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a process failed: exit codes {[p.returncode for p in procs]}")
        ranks = [json.loads(Path(out, f"rank-{i}.json").read_text()) for i in range(WORLD)]
        receiver = json.loads(Path(out, "receiver.json").read_text())
    largest = ranks[0]["largest_tensor_bytes"]
    bound = largest + 2 * bucket_mb * MIB
    rows = []
    for path in ("streamed", "streamed-ipc", "gathered"):
        peaks = [r["paths"][path]["peak_above_before"] for r in ranks]
        rows.append(
            {
                "path": path,
                "ranks": WORLD,
                "bucket_mb": bucket_mb,
                "mb": round(ranks[0]["model_bytes"] / MIB),
                "seconds": ranks[0]["paths"][path]["seconds"],
                "rank_peak_above_before_mb": [round(p / MIB) for p in peaks],
                "receiver_peak_above_before_mb": round(
                    receiver["paths"][path]["peak_above_before"] / MIB
                ),
                "bound_mb": round(bound / MIB),
                "within_bound": max(peaks) <= bound,
            }
        )
    return {
        "largest_tensor_mb": round(largest / MIB),
        "rows": rows,
        "load_avg_1min_before": load_before,
        "load_avg_1min_after": os.getloadavg()[0],
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: children stop, temporary folders go
    process_main(
        int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    )
