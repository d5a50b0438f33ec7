"""The main job (`./dev train`, configs/mle.yaml) timed end to end, here and on a slower CPU.

Two arms, one after the other, each a fresh run in its own temporary folder:

* `here`: the job as a user runs it (`model.dtype: auto`: bf16 where this CPU has it natively
  and it timed faster, else fp32);
* `slow`: a stand-in for the slower CPUs of this family without AVX-512: fp32, torch, oneDNN
  and OpenBLAS held to AVX2 kernels, and the whole process tree held to a share of the CPUs by
  a cgroup CPU quota (`--slow-cpus`, root only). The share is chosen so that the speed
  yardstick, `benchmarks/vs_trl.py --no-trl` (seconds per GRPO iteration in fp32), reads what
  the slow machine read.

Per arm: the yardstick (unless --no-yardstick), then the job's wall seconds (set-up excluded:
the venv and the model exist), held-out reward and solved rate before and after training,
skipped batches, seconds per step. Written to benchmarks/results/main_job.json with
the machine (CPU model, AVX-512 / bf16 flags, load).

    python benchmarks/main_job.py                      # both arms (the slow one needs root)
    python benchmarks/main_job.py --arms here --no-yardstick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _machine import machine_state  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "main_job.json"
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
}


@contextmanager
def cpu_quota(cpus: float | None):
    """A cgroup holding its processes to `cpus` CPUs (v2 cpu.max or v1 cfs quota); yields the
    file a process writes its pid to, or None without a quota. Removed afterwards."""
    if cpus is None:
        yield None
        return
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    base = Path("/sys/fs/cgroup") if v2.is_file() else Path("/sys/fs/cgroup/cpu")
    group = base / f"practicum-bench-{os.getpid()}"
    period = 100_000
    try:
        group.mkdir()
        if v2.is_file():
            (group / "cpu.max").write_text(f"{int(cpus * period)} {period}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
    except OSError as err:
        raise SystemExit(
            f"main_job: cannot make a CPU-quota cgroup under {base} ({err}); "
            "the slow arm needs root and a writable cgroup cpu controller"
        ) from None
    try:
        yield group / "cgroup.procs"
    finally:
        for _ in range(50):  # the tree has exited; the kernel may take a moment to let go
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def run(cmd: list[str], env: dict, procs: Path | None, log: Path) -> float:
    """Run `cmd` (inside the quota's cgroup when given), output to `log`; wall seconds."""

    def enter():
        if procs is not None:
            procs.write_text(str(os.getpid()))

    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=enter
        )
        try:
            returncode = proc.wait()
        except BaseException:  # Ctrl-C or SIGTERM: the job unwinds too (its work folders go)
            proc.terminate()
            proc.wait(120)
            raise
    if returncode != 0:
        raise SystemExit(f"main_job: {cmd[1]} failed (exit {returncode}); see {log}")
    return time.perf_counter() - t0


def here_dtype():
    """What `model.dtype: auto` picks for the job's LoRA policy on this CPU."""
    import torch

    from practicum.engine.device import auto_dtype

    return auto_dtype(torch.device("cpu"), lora=True)


def arm(name: str, args, work: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    overrides = [f"run.out_dir={work / name}"]
    slow = name == "slow"
    if slow:
        env.update(AVX2_ONLY)
        overrides.append("model.dtype=float32")
    python = sys.executable
    result: dict = {"arm": name, "cpus": args.slow_cpus if slow else None}
    with cpu_quota(args.slow_cpus if slow else None) as procs:
        if args.yardstick:
            out = work / f"{name}_vs_trl.json"
            run(
                [
                    python,
                    "benchmarks/vs_trl.py",
                    "--no-trl",
                    "--dtype",
                    "float32",
                    "--no-reference",
                    "--out",
                    str(out),
                ],
                env,
                procs,
                work / f"{name}_vs_trl.log",
            )
            result["vs_trl_practicum_seconds_fp32"] = json.loads(out.read_text())[
                "practicum_seconds"
            ]
        practicum = str(Path(sys.executable).parent / "practicum")
        cmd = [practicum, "train", "configs/mle.yaml", *overrides]
        result["wall_seconds"] = run(cmd, env, procs, work / f"{name}_train.log")
    summary = json.loads((work / name / "mle" / "summary.json").read_text())
    steps = [
        json.loads(line)
        for line in (work / name / "mle" / "metrics.jsonl").read_text().splitlines()
    ]
    result.update(
        {
            "dtype": "float32" if slow else str(here_dtype()).removeprefix("torch."),
            "held_out_before": summary["eval_before"]["reward_mean"],
            "held_out_after": summary["eval_after"]["reward_mean"],
            "solved_before": summary["eval_before"]["solved_rate"],
            "solved_after": summary["eval_after"]["solved_rate"],
            "steps": summary["steps"],
            "skipped_batches": summary["skipped_batches"],
            "episodes": summary["episodes"],
            "step_seconds": [round(m["step_seconds"], 1) for m in steps if "step_seconds" in m],
        }
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default="here,slow", help="comma-separated: here, slow")
    ap.add_argument(
        "--slow-cpus",
        type=float,
        default=0.71,
        help="CPUs the slow arm may use (cgroup quota): 0.71 of 2 AVX-512 EPYC cores read "
        "18.7 s on the yardstick, where the slow machine of issue 39 read 19.7 s",
    )
    ap.add_argument("--no-yardstick", dest="yardstick", action="store_false")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    machine = machine_state()
    rows = []
    with tempfile.TemporaryDirectory(prefix="practicum-main-job-") as tmp:
        for name in args.arms.split(","):
            rows.append(arm(name.strip(), args, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    machine["load_avg_1min_after"] = os.getloadavg()[0]
    record = {"machine": machine, "date": time.strftime("%Y-%m-%d"), "arms": rows}
    args.out.write_text(json.dumps(record, indent=1))
    print(
        f"{'arm':<6} {'yardstick s':>11} {'wall':>8} {'held-out':>17} {'solved':>11} {'skipped':>7}"
    )
    for r in rows:
        wall = f"{int(r['wall_seconds'] // 60)}m{int(r['wall_seconds'] % 60):02d}s"
        yard = r.get("vs_trl_practicum_seconds_fp32")
        print(
            f"{r['arm']:<6} {yard if yard is None else round(yard, 2)!s:>11} {wall:>8} "
            f"{r['held_out_before']:+7.2f} -> {r['held_out_after']:+6.2f} "
            f"{r['solved_before']:4.2f}->{r['solved_after']:4.2f} {r['skipped_batches']:>7}"
        )
    print(f"written {args.out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: the job stops, the temporary folder and cgroup go
    main()
