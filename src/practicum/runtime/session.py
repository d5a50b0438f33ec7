"""A training session: everything a run needs, built once, resumed from the run folder.

    trainable + sampler (engine) -> GenerationServer (batches every generate call)
    ModelService (environments' own LLM calls, through the same server)
    Suite (registered environment: env factory, train/held-out tasks)
    Learner, EpisodeStore + ConsumptionLedger, MetricsLogger, TaskCursor (+ curriculum)

Both runtimes (sync, async) use it through `runtime.loop.train`; so do `practicum eval` and
`practicum rft`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from practicum.config import Config, dump_config
from practicum.errors import ConfigError
from practicum.engine.base import SamplingParams, Trainable
from practicum.engine.chat import ChatFormat
from practicum.engine.server import GenerationServer
from practicum.engine.service import ModelService
from practicum.envs.base import Task
from practicum.envs.registry import Suite, SuiteContext, build_suite
from practicum.episode import Episode
from practicum.learner import Learner, latest_checkpoint
from practicum.report import MetricsLogger, episode_metrics, plot_rewards
from practicum.runtime.cursor import Curriculum, TaskCursor
from practicum.runtime.rollout import EpisodeBuilder, RolloutLimits, rollout_batch
from practicum.store import ConsumptionLedger, EpisodeStore

log = logging.getLogger(__name__)

RUN_FILES = ("episodes.jsonl", "consumed.jsonl", "metrics.jsonl", "summary.json")
RUN_FOLDERS = ("checkpoints", "eval", "tb")


def load_engine(cfg: Config):
    """(trainable, sampler) for the config's model and engine (engine.kind)."""
    from practicum.engine.hf import PolicyConfig, load_hf_engine

    m = cfg.model
    policy = PolicyConfig(
        model=m.model, dtype=m.dtype, device=m.device,
        attn_implementation=m.attn_implementation, lora=m.lora, lora_r=m.lora_r, lora_alpha=m.lora_alpha,
        lora_dropout=m.lora_dropout, lora_target_modules=list(m.lora_target_modules),
        gradient_checkpointing=m.gradient_checkpointing, merged_sampling=m.merged_sampling,
        init=m.init, seed=cfg.run.seed)
    if cfg.engine.kind == "vllm":
        if "actor" in (cfg.runtime.ray_engine, cfg.runtime.ray_learner):
            raise ConfigError("config error at runtime.ray_engine: Ray actors run the hf engine "
                              "only (engine.kind=vllm needs its own Python environment)")
        from practicum.engine.vllm import load_vllm_engine
        from practicum.engine.vllm_sampler import VLLMOptions

        e = cfg.engine
        return load_vllm_engine(policy, VLLMOptions(max_model_len=e.max_model_len,
                                                    kv_cache_gb=e.kv_cache_gb, threads=e.threads))
    rt = cfg.runtime
    if rt.backend == "ray" and "actor" in (rt.ray_engine, rt.ray_learner):
        from practicum.runtime.ray_learner import load_placed_engine

        return load_placed_engine(cfg, policy)
    return load_hf_engine(policy)


@dataclass
class Session:
    cfg: Config
    trainable: Trainable
    server: GenerationServer
    models: ModelService
    chat: ChatFormat
    suite: Suite
    learner: Learner
    store: EpisodeStore
    ledger: ConsumptionLedger
    metrics: MetricsLogger
    cursor: TaskCursor
    curriculum: Curriculum
    extra: dict = field(default_factory=dict)
    """The batch source's state from the checkpoint (e.g. the async runtime's open groups)."""
    skipped_batches: int = 0
    """Batches with nothing to train on, over the whole run (kept in checkpoints)."""
    env_pool: Any = None
    """runtime.backend=ray: the Ray env workers behind `suite.make_env` (`RayEnvPool`)."""

    @property
    def run_dir(self) -> Path:
        return self.cfg.run_dir

    @property
    def limits(self) -> RolloutLimits:
        r = self.cfg.rollout
        return RolloutLimits(r.max_turns, r.max_seq_len, r.failure_reward)

    def sampling(self, temperature: float | None = None) -> SamplingParams:
        s = self.cfg.sampling
        t = s.temperature if temperature is None else temperature
        return SamplingParams(temperature=t, top_p=s.top_p if t > 0 else 1.0,
                              max_new_tokens=s.max_new_tokens)

    def builder(self, task: Task, gid: str, slot: int,
                temperature: float | None = None) -> EpisodeBuilder:
        """A new episode of `task` as slot `slot` of group `gid`, in a fresh environment."""
        return EpisodeBuilder(self.suite.make_env(self.models), task, gid, slot, self.chat,
                              self.limits, self.sampling(temperature), self.cfg.run.seed)

    def rollout(self, items: list[tuple[Task, str, int]],
                temperature: float | None = None) -> list[Episode]:
        """One episode per (task, group id, slot), all in lockstep."""
        builders = [self.builder(t, g, k, temperature) for t, g, k in items]
        return rollout_batch(self.server, builders, self.cfg.rollout.env_workers)

    def publish(self) -> None:
        """Give the sampler the learner's weights as version `learner.step`."""
        with self.server.updating():
            self.server.publish(self.trainable.export_weights(self.learner.step))

    def evaluate(self, label: str) -> dict:
        """Held-out evaluation (greedy by default): one episode per held-out task, seeded by
        the task alone so evaluations at different steps face the same draws."""
        ev = self.cfg.eval
        tasks = self.suite.eval_tasks[: ev.size or None]
        eps = self.rollout([(t, f"eval/{t.task_id}", 0) for t in tasks], ev.temperature)
        result = {"label": label, "policy_version": self.server.version, "tasks": len(eps),
                  **episode_metrics(eps, self.cfg.curriculum.solved_reward)}
        out = self.run_dir / "eval"
        out.mkdir(exist_ok=True)
        (out / f"{label}.json").write_text(json.dumps(
            {**result, "episodes": [{"task_id": e.task_id, "reward": e.reward,
                                     "solved": e.solved, "metrics": e.metrics,
                                     "turns": [t.action_text for t in e.turns],
                                     "failure": e.failure} for e in eps]}, indent=1))
        return result

    def checkpoint(self, source_state: dict | None = None) -> Path:
        if source_state is not None:
            self.extra = dict(source_state)
        state = {"cursor": self.cursor.position, "ledger": self.ledger.state(),
                 "curriculum": self.curriculum.state(), "skipped_batches": self.skipped_batches,
                 "source": self.extra}
        if self.suite.state is not None:
            state["suite"] = self.suite.state()
        return self.learner.save(self.run_dir / "checkpoints", state)

    def finish(self, started: float, extra_summary: dict | None = None) -> dict:
        """Final evaluation, checkpoint, plot and summary.json (plus `extra_summary` entries)."""
        final = self.evaluate(f"step_{self.learner.step:06d}")
        self.metrics.log(self.learner.step, {f"eval/{k}": v for k, v in final.items()
                                             if isinstance(v, (int, float))})
        self.checkpoint()
        plot = plot_rewards(self.run_dir)
        before_file = self.run_dir / "eval" / "step_000000.json"
        before = json.loads(before_file.read_text()) if before_file.exists() else None
        summary = {
            "run_dir": str(self.run_dir), "steps": self.learner.step,
            "episodes": len(self.store), "skipped_batches": self.skipped_batches,
            "wall_seconds": time.time() - started,
            "eval_before": before and {k: v for k, v in before.items() if k != "episodes"},
            "eval_after": final, "plot": str(plot), "mode": self.cfg.runtime.mode,
            "backend": self.cfg.runtime.backend,
            **({"ray": self.env_pool.summary()} if self.env_pool is not None else {}),
            **({"ray_engine": self.server.sampler.summary()}
               if self.cfg.runtime.ray_engine == "actor" else {}),
            **({"ray_learner_pid": self.trainable.pid}
               if self.cfg.runtime.ray_learner == "actor" else {}),
            **(extra_summary or {}),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    def close(self) -> None:
        self.server.stop()
        self.metrics.close()
        if self.env_pool is not None:
            self.env_pool.shutdown()
        for part in (self.server.sampler, self.trainable):  # vLLM's files, Ray actors
            close = getattr(part, "close", None)
            if close is not None:
                close()


def open_session(cfg: Config) -> Session:
    """Build the session; resume from the run folder's latest checkpoint when run.resume."""
    run_dir = cfg.run_dir
    if not cfg.run.resume:  # a fresh start in an existing run folder: clear the old run
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        for name in RUN_FOLDERS:
            shutil.rmtree(run_dir / name, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    ctx = SuiteContext(cfg.run.seed, cfg.rollout.failure_reward, run_dir, cfg.rollout.max_turns)
    suite = build_suite(cfg.task.name, cfg.task.options, ctx)
    trainable, sampler = load_engine(cfg)
    r = cfg.rollout
    server = GenerationServer(sampler, max_batch=max(64, r.group_size * r.tasks_per_step,
                                                     cfg.runtime.num_actors)).start()
    chat = ChatFormat(trainable.tokenizer)
    curriculum = Curriculum(cfg.curriculum)
    ckpt = latest_checkpoint(run_dir / "checkpoints") if cfg.run.resume else None
    state = torch.load(ckpt / "trainer.pt", weights_only=False)["extra"] if ckpt else {}
    env_pool = None
    if cfg.runtime.backend == "ray":
        from practicum.runtime.ray_envs import use_ray

        rt = cfg.runtime
        try:
            env_pool = use_ray(suite, cfg.task.name, cfg.task.options, ctx, rt.ray_address,
                               rt.ray_env_cpus, warm=rt.num_actors if rt.mode == "async"
                               else r.group_size * r.tasks_per_step,
                               call_timeout=rt.ray_call_timeout_s)
        except BaseException:
            server.stop()
            for part in (sampler, trainable):  # Ray actors (and the Ray they started)
                if hasattr(part, "close"):
                    part.close()
            raise
    s = Session(cfg=cfg, trainable=trainable, server=server,
                models=ModelService(server, chat, cfg.model.dtype), chat=chat, suite=suite,
                learner=getattr(trainable, "learner", None) or Learner(trainable, cfg),
                store=EpisodeStore(run_dir / "episodes.jsonl"),
                ledger=ConsumptionLedger.resume(run_dir / "consumed.jsonl", state.get("ledger")),
                metrics=MetricsLogger(run_dir),
                cursor=TaskCursor(suite.train_tasks, cfg.run.seed, curriculum=curriculum),
                curriculum=curriculum, env_pool=env_pool)
    if ckpt is not None:
        s.learner.load(ckpt)
        s.cursor.position = state["cursor"]
        s.curriculum.load_state(state["curriculum"])
        s.skipped_batches = state.get("skipped_batches", 0)
        if state.get("suite") is not None and suite.load_state is not None:
            suite.load_state(state["suite"])
        s.extra = state.get("source", {})
        s.publish()
        log.info("resumed from %s (step %d, %d batches)", ckpt, s.learner.step,
                 s.ledger.batches)
    return s
