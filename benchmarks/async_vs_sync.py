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
(runtime.backend=ray, a local Ray started by the benchmark; results in
async_vs_sync_ray.json / async_vs_sync_both.json). The Ray worker is the isolated process
there, so the bandit runs in it directly (task.options.process=false) instead of in a child
process per episode as under the local backend.

    python benchmarks/async_vs_sync.py [--steps 10] [--actors 8] [--time-scale 1.0]
                                       [--backend local|ray|both]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from _machine import machine_state  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS = Path(__file__).parent / "results"


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A random tiny Llama with the SmolLM2 tokenizer (the recipe of tests/conftest.py)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from practicum.engine.models import load_builtin_tokenizer

    tok = load_builtin_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         initializer_range=0.1)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def overrides(args, model: str, out_dir: Path, mode: str, backend: str = "local") -> list[str]:
    s = args.time_scale
    options = (f"{{arms: {{fast: {{reward: 0.3, seconds: 0.5}}, slow: {{reward: 1.0, seconds: 2.0}}}}, "
               f"sigma: {args.sigma}, time_scale: {s}, fallback_arm: random, step_timeout: 600}}")
    return [f"model.model={model}", "model.dtype=float32", "task.name=timed_bandit",
            "rollout.group_size=4", "rollout.tasks_per_step=2", f"train.steps={args.steps}",
            "train.micro_batch_size=8", "train.checkpoint_every=1000", "eval.every=0",
            "sampling.max_new_tokens=8", "algo.dynamic_sampling=false",
            "algo.mask_overlong=false",  # the random model's replies are all cut
            f"rollout.env_workers={args.actors}", f"runtime.num_actors={args.actors}",
            f"run.out_dir={out_dir}", f"run.name={mode}-{backend}", f"runtime.mode={mode}",
            f"runtime.backend={backend}",
            f"run.seed={args.seed}", f"task.options={options}", "task.options.eval_size=1",
            # under Ray the worker is the isolated process already: no child per episode
            f"task.options.process={backend == 'local'}"]


def measure(args, model: str, out_dir: Path, mode: str, backend: str = "local") -> dict:
    from practicum.config import load_config
    from practicum.report import read_metrics
    from practicum.runtime.train import run_training

    cfg = load_config(None, overrides(args, model, out_dir, mode, backend))
    t0 = time.perf_counter()
    summary = run_training(cfg, progress=False)
    total = time.perf_counter() - t0
    rows = [r for r in read_metrics(cfg.run_dir) if "learner_seconds" in r]
    env_s = sum(r["env_seconds"] for r in rows)
    learner_s = sum(r["learner_seconds"] for r in rows)
    episodes = int(sum(r["batch_episodes"] for r in rows))
    if mode == "async":
        wall = summary["async"]["train_seconds"]
        extra = {k: summary["async"][k] for k in ("actor_utilisation", "generation_utilisation",
                                                   "generation_batch_mean", "actor_restarts")}
    else:
        wall = sum(r["step_seconds"] for r in rows)
        extra = {}
    ideal = env_s / args.actors + learner_s
    if backend == "ray":
        extra["ray_workers_started"] = summary["ray"]["workers_started"]
    return {"mode": mode, "backend": backend, "wall_seconds": wall,
            "total_seconds_with_eval": total,
            "episodes": episodes, "action_seconds": env_s, "learner_seconds": learner_s,
            "env_utilisation": env_s / (args.actors * wall), "learner_utilisation": learner_s / wall,
            "ideal_seconds": ideal, "ideal_over_wall": ideal / wall, **extra}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--actors", type=int, default=8)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=("local", "ray", "both"), default="local",
                   help="where the environments run (runtime.backend)")
    p.add_argument("--model", default=None, help="model spec (default: a random tiny Llama)")
    args = p.parse_args()
    state = machine_state()
    logging.basicConfig(level=logging.WARNING)
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
                    args, model, Path(tmp) / "runs", m, b)
            key = "" if b == "local" else f"/{b}"
            ratios[b] = (results[f"sync{key}"]["wall_seconds"]
                         / results[f"async{key}"]["wall_seconds"])
    print(f"\n{'mode':6} {'backend':7} {'episodes':>8} {'wall s':>8} {'actions s':>10} "
          f"{'learner s':>10} {'env util':>9} {'learner util':>13} {'ideal s':>8} "
          f"{'ideal/wall':>11}")
    for r in results.values():
        print(f"{r['mode']:6} {r['backend']:7} {r['episodes']:8d} {r['wall_seconds']:8.1f} "
              f"{r['action_seconds']:10.1f} {r['learner_seconds']:10.1f} "
              f"{r['env_utilisation']:9.2f} {r['learner_utilisation']:13.2f} "
              f"{r['ideal_seconds']:8.1f} {r['ideal_over_wall']:11.2f}")
    for b in backends:
        asyn = results["async" if b == "local" else f"async/{b}"]
        print(f"\n{b}: async speed-up over sync: {ratios[b]:.2f}x (target >= 2); async reaches "
              f"{asyn['ideal_over_wall']:.0%} of the ideal bound (target >= 85%); async actors "
              f"spent {asyn['actor_utilisation']:.0%} of their time inside episodes")
    RESULTS.mkdir(exist_ok=True)
    name = "async_vs_sync" if args.backend == "local" else f"async_vs_sync_{args.backend}"
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps({"args": vars(args), "machine": state,
                               "ratio": ratios.get("local", ratios.get("ray")),
                               "ratios": ratios, **results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
