"""Sync vs async runtime on the same training episodes with heavy-tailed action durations.

Both runs use one config (timed bandit: fast 0.5 s / slow 2 s mean, lognormal sigma 1; a random
tiny Llama, whose unparsable replies run a random arm; 8 parallel actors = 8 sync env workers;
no dynamic sampling, so both train on exactly steps x 8 episodes); only runtime.mode differs.

Printed and written to benchmarks/results/async_vs_sync.json:
  wall          training-loop seconds (sync: sum of step times; async: runtime start to stop)
  ratio         sync wall / async wall                                  (target >= 2)
  env util      sum of action durations / (actors x wall)
  learner util  learner seconds / wall
  ideal         sum of action durations / actors + learner seconds      (async target: ideal /
                wall >= 0.85; the learner overlaps actions in async, so it can beat the bound)

With --backend ray (or both) the same comparison runs with the environments in Ray actors
(placement.kind=ray, a local Ray started by the benchmark; results in
async_vs_sync_ray.json / async_vs_sync_both.json). The Ray worker is the isolated process
there, so the bandit runs in it directly (task.options.process=false) instead of in a child
process per episode as with placement.kind=local.

With --overlap, instead: an async run (local backend) whose learner step is as long as the
actions of a step (each `Learner.train_step` padded with a sleep to --learner-seconds, default
a step's 8 episodes x the mean action / actors: a learner on a device of its own), to show that
sampling and actions go on while the learner trains; then, as the contrast, the same run with
the server's gate held through each train step (the behaviour before sampling overlapped
training). Written to async_vs_sync_overlap.json:
  overlap bound  max(sum of action durations / actors, learner seconds): no run can be faster
  serial         sum of action durations / actors + learner seconds: nothing overlapped
  during train   generate calls that started and ended inside a train step (and their tokens)

    python benchmarks/async_vs_sync.py [--steps 10] [--actors 8] [--time-scale 1.0]
                                       [--backend local|ray|both] [--overlap]
    python benchmarks/async_vs_sync.py --overlap --steps 8 --time-scale 2 --sigma 0.3
                                       (the committed overlap row: light tails, so the wait for
                                       a group's slowest member does not hide the overlap)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS = Path(__file__).parent / "results"


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A random tiny Llama with the SmolLM2 tokenizer (the recipe of tests/conftest.py)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.models import load_builtin_tokenizer

    tok = load_builtin_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        initializer_range=0.1,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def overrides(args, model: str, out_dir: Path, mode: str, backend: str = "local") -> list[str]:
    s = args.time_scale
    options = (
        f"{{arms: {{fast: {{reward: 0.3, seconds: 0.5}}, slow: {{reward: 1.0, seconds: 2.0}}}}, "
        f"sigma: {args.sigma}, time_scale: {s}, fallback_arm: random, step_timeout: 600}}"
    )
    return [
        f"model.model={model}",
        "model.dtype=float32",
        "task.name=timed_bandit",
        "rollout.group_size=4",
        "rollout.tasks_per_step=2",
        f"train.steps={args.steps}",
        "train.micro_batch_size=8",
        "train.checkpoint_every=1000",
        "eval.every=0",
        "sampling.max_new_tokens=8",
        "algo.dynamic_sampling=false",
        "algo.mask_overlong=false",  # the random model's replies are all cut
        f"rollout.env_workers={args.actors}",
        f"runtime.num_actors={args.actors}",
        f"run.out_dir={out_dir}",
        f"run.name={mode}-{backend}",
        f"runtime.mode={mode}",
        f"placement.kind={backend}",
        f"run.seed={args.seed}",
        f"task.options={options}",
        "task.options.eval_size=1",
        # under Ray the worker is the isolated process already: no child per episode
        f"task.options.process={backend == 'local'}",
    ]


def measure(args, model: str, out_dir: Path, mode: str, backend: str = "local") -> dict:
    from practicum.config import load_config
    from practicum.report import read_metrics
    from practicum.runtime.train import run_training

    cfg = load_config(None, overrides(args, model, out_dir, mode, backend))
    t0 = time.perf_counter()
    summary = run_training(cfg, progress=True)
    total = time.perf_counter() - t0
    rows = [r for r in read_metrics(cfg.run_dir) if "learner_seconds" in r]
    env_s = sum(r["env_seconds"] for r in rows)
    learner_s = sum(r["learner_seconds"] for r in rows)
    episodes = int(sum(r["batch_episodes"] for r in rows))
    if mode == "async":
        wall = summary["async"]["train_seconds"]
        extra = {
            k: summary["async"][k]
            for k in (
                "actor_utilisation",
                "generation_utilisation",
                "generation_batch_mean",
                "actor_restarts",
            )
        }
    else:
        wall = sum(r["step_seconds"] for r in rows)
        extra = {}
    ideal = env_s / args.actors + learner_s
    if backend == "ray":
        extra["ray_workers_started"] = summary["ray"]["workers_started"]
    return {
        "mode": mode,
        "backend": backend,
        "wall_seconds": wall,
        "total_seconds_with_eval": total,
        "episodes": episodes,
        "action_seconds": env_s,
        "learner_seconds": learner_s,
        "env_utilisation": env_s / (args.actors * wall),
        "learner_utilisation": learner_s / wall,
        "ideal_seconds": ideal,
        "ideal_over_wall": ideal / wall,
        **extra,
    }


ARMS_MEAN_SECONDS = (0.5 + 2.0) / 2
"""Mean action before time_scale: the random model's replies run a random arm."""


@contextmanager
def timed_learner_and_sampler(learner_seconds: float):
    """Pad every learner step to `learner_seconds` (inside the step, so inside the server's
    training block); record (start, end) of train steps and (start, end, tokens) of generate
    calls."""
    from practicum.engine.hf_sampler import HFSampler
    from practicum.learner import Learner

    steps, calls = [], []
    train_step, generate = Learner.train_step, HFSampler.generate

    def padded_train_step(self, batch):
        t0 = time.perf_counter()
        metrics = train_step(self, batch)
        time.sleep(max(0.0, learner_seconds - (time.perf_counter() - t0)))
        steps.append((t0, time.perf_counter()))
        if metrics is not None:
            metrics["learner_seconds"] = steps[-1][1] - t0
        return metrics

    def timed_generate(self, prompts, *args, **kwargs):
        t0 = time.perf_counter()
        samples = generate(self, prompts, *args, **kwargs)
        calls.append((t0, time.perf_counter(), sum(len(x.token_ids) for x in samples)))
        return samples

    Learner.train_step, HFSampler.generate = padded_train_step, timed_generate
    try:
        yield steps, calls
    finally:
        Learner.train_step, HFSampler.generate = train_step, generate


@contextmanager
def gate_held_while_training():
    """The behaviour before sampling overlapped training: no generate call during a train
    step (the server's training block excludes all sampling, as its update block does)."""
    from practicum.engine.server import GenerationServer

    training = GenerationServer.training
    GenerationServer.training = GenerationServer.updating
    try:
        yield
    finally:
        GenerationServer.training = training


def measure_overlap(args, model: str, out_dir: Path, hold_gate: bool = False) -> dict:
    """The async run with a learner step as long as the actions of a step (module doc)."""
    from practicum.store import EpisodeStore

    per_step = args.learner_seconds
    if per_step is None:
        per_step = 8 * ARMS_MEAN_SECONDS * args.time_scale / args.actors  # 4 x 2 episodes
    with (
        timed_learner_and_sampler(per_step) as (steps, calls),
        gate_held_while_training() if hold_gate else nullcontext(),
    ):
        r = measure(args, model, out_dir, "async")
    stored = list(EpisodeStore(out_dir / "async-local" / "episodes.jsonl"))
    during = [c for c in calls if any(a < c[0] and c[1] < b for a, b in steps)]
    per_actor = r["action_seconds"] / args.actors
    bound = max(per_actor, r["learner_seconds"])
    serial = per_actor + r["learner_seconds"]
    return {
        **r,
        "mode": "async/overlap" + (" gate held" if hold_gate else ""),
        "learner_step_padded_to": per_step,
        "overlap_bound_seconds": bound,
        "serial_seconds": serial,
        "overlap_bound_over_wall": bound / r["wall_seconds"],
        "serial_over_wall": serial / r["wall_seconds"],
        "generate_calls": len(calls),
        "generate_calls_during_training": len(during),
        "tokens_sampled": sum(n for *_, n in calls),
        "tokens_sampled_during_training": sum(n for *_, n in during),
        "episodes_stored": len(stored),
        "actor_seconds_in_stored_episodes": sum(e.info.get("seconds", 0.0) for e in stored),
        "action_seconds_of_stored_episodes": sum(e.env_duration for e in stored),
    }


def overlap_main(args, state: dict) -> None:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(build_tiny_model(Path(tmp) / "tiny"))
        for held in (False, True):
            r = measure_overlap(args, model, Path(tmp) / f"runs-{held}", hold_gate=held)
            rows["gate_held" if held else "overlap"] = r
    print(
        f"\n{'mode':24} {'episodes':>8} {'wall s':>7} {'actions/actors s':>17} "
        f"{'learner s':>10} {'bound s':>8} {'serial s':>9} {'bound/wall':>11} "
        f"{'gen during train':>17}"
    )
    for r in rows.values():
        print(
            f"{r['mode']:24} {r['episodes']:8d} {r['wall_seconds']:7.1f} "
            f"{r['action_seconds'] / args.actors:17.1f} {r['learner_seconds']:10.1f} "
            f"{r['overlap_bound_seconds']:8.1f} {r['serial_seconds']:9.1f} "
            f"{r['overlap_bound_over_wall']:11.2f} "
            f"{r['generate_calls_during_training']:>8d} / {r['generate_calls']:<6d}"
        )
    r = rows["overlap"]
    print(
        f"\noverlap: {r['tokens_sampled_during_training']} of {r['tokens_sampled']} tokens "
        f"sampled inside train steps; wall {r['wall_seconds']:.1f} s against the overlap bound "
        f"{r['overlap_bound_seconds']:.1f} s and the serial sum {r['serial_seconds']:.1f} s; "
        f"with the gate held through each train step (as before): "
        f"{rows['gate_held']['wall_seconds']:.1f} s"
    )
    out = RESULTS / "async_vs_sync_overlap.json"
    state["load_avg_1min_after"] = os.getloadavg()[0]
    out.write_text(json.dumps({"args": vars(args), "machine": state, **rows}, indent=1))
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--actors", type=int, default=8)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--backend",
        choices=("local", "ray", "both"),
        default="local",
        help="where the environments run (placement.kind: ray = in Ray actors)",
    )
    p.add_argument("--model", default=None, help="model spec (default: a random tiny Llama)")
    p.add_argument(
        "--overlap",
        action="store_true",
        help="only the async run with a learner step as long as a step's actions",
    )
    p.add_argument(
        "--learner-seconds",
        type=float,
        default=None,
        help="--overlap: pad each learner step to this (default: a step's actions per actor)",
    )
    args = p.parse_args()
    state = machine_state()
    logging.basicConfig(level=logging.WARNING)
    if args.overlap:
        return overlap_main(args, state)
    backends = ("local", "ray") if args.backend == "both" else (args.backend,)
    if "ray" in backends:  # one local Ray for every run (a pool joins it)
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
    results, ratios = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(build_tiny_model(Path(tmp) / "tiny"))
        for b in backends:
            for m in ("sync", "async"):
                results[m if b == "local" else f"{m}/{b}"] = measure(
                    args, model, Path(tmp) / "runs", m, b
                )
            key = "" if b == "local" else f"/{b}"
            ratios[b] = (
                results[f"sync{key}"]["wall_seconds"] / results[f"async{key}"]["wall_seconds"]
            )
    print(
        f"\n{'mode':6} {'backend':7} {'episodes':>8} {'wall s':>8} {'actions s':>10} "
        f"{'learner s':>10} {'env util':>9} {'learner util':>13} {'ideal s':>8} "
        f"{'ideal/wall':>11}"
    )
    for r in results.values():
        print(
            f"{r['mode']:6} {r['backend']:7} {r['episodes']:8d} {r['wall_seconds']:8.1f} "
            f"{r['action_seconds']:10.1f} {r['learner_seconds']:10.1f} "
            f"{r['env_utilisation']:9.2f} {r['learner_utilisation']:13.2f} "
            f"{r['ideal_seconds']:8.1f} {r['ideal_over_wall']:11.2f}"
        )
    for b in backends:
        asyn = results["async" if b == "local" else f"async/{b}"]
        print(
            f"\n{b}: async speed-up over sync: {ratios[b]:.2f}x (target >= 2); async reaches "
            f"{asyn['ideal_over_wall']:.0%} of the ideal bound (target >= 85%); async actors "
            f"spent {asyn['actor_utilisation']:.0%} of their time inside episodes"
        )
    RESULTS.mkdir(exist_ok=True)
    name = "async_vs_sync" if args.backend == "local" else f"async_vs_sync_{args.backend}"
    out = RESULTS / f"{name}.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "machine": state,
                "ratio": ratios.get("local", ratios.get("ray")),
                "ratios": ratios,
                **results,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
