"""A training session: everything a runtime needs, built once, resumed from the run folder.

Both runtimes (sync, async) use it: policy + learner, episode store, metrics, task cursor,
held-out evaluation, checkpoints, and the final report (plot + summary.json).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from practicum.config import Config, dump_config
from practicum.engine.base import SamplingParams
from practicum.engine.chat import ChatFormat
from practicum.envs.base import Task
from practicum.episode import Episode
from practicum.learner import Learner, latest_checkpoint
from practicum.report import MetricsLogger, plot_rewards
from practicum.runtime.rollout import RolloutLimits, rollout_batch
from practicum.runtime.store import EpisodeStore
from practicum.suites import Suite, TaskCursor, load_suite

log = logging.getLogger(__name__)


def load_policy(cfg: Config):
    from practicum.engine.hf import Policy, PolicyConfig

    m = cfg.model
    return Policy(PolicyConfig(model=m.model, dtype=m.dtype, lora=m.lora, lora_r=m.lora_r,
                               lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                               lora_target_modules=list(m.lora_target_modules),
                               gradient_checkpointing=m.gradient_checkpointing,
                               merged_sampling=m.merged_sampling,
                               seed=cfg.run.seed))


@dataclass
class Session:
    cfg: Config
    policy: object
    chat: ChatFormat
    suite: Suite
    learner: Learner
    store: EpisodeStore
    metrics: MetricsLogger
    cursor: TaskCursor
    consumed: int = 0
    """Episodes of the store already trained on (or filtered out) — the resume point."""
    extra: dict = field(default_factory=dict)

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
        return SamplingParams(temperature=t, top_p=s.top_p, max_new_tokens=s.max_new_tokens)

    def rollout(self, tasks: list[Task], group_ids: list[str], seed: int | None,
                temperature: float | None = None) -> list[Episode]:
        return rollout_batch(self.policy, self.chat, self.suite.make_env, tasks, group_ids,
                             self.sampling(temperature), self.limits,
                             self.cfg.rollout.env_workers, seed)

    def checkpoint(self) -> Path:
        state = {"data_position": self.cursor.position, "consumed": self.consumed, **self.extra}
        if self.suite.state is not None:
            state["suite"] = self.suite.state()
        return self.learner.save(self.run_dir / "checkpoints", state)

    def evaluate(self, label: str) -> dict:
        """Greedy (by default) held-out evaluation: one episode per held-out task."""
        ev = self.cfg.eval
        tasks = self.suite.eval_tasks[: ev.size or None]
        eps = []
        bs = max(1, self.cfg.train.micro_batch_size * 2)
        for i in range(0, len(tasks), bs):
            chunk = tasks[i:i + bs]
            eps += self.rollout(chunk, [f"eval/{t.task_id}" for t in chunk],
                                seed=self.cfg.run.seed, temperature=ev.temperature)
        rewards = [e.reward for e in eps]
        result = {
            "label": label, "policy_version": self.policy.version, "tasks": len(eps),
            "reward_mean": sum(rewards) / max(1, len(rewards)),
            "success_rate": sum(r >= 1.0 for r in rewards) / max(1, len(rewards)),
            "failures": sum(e.failure is not None for e in eps),
            "mean_turns": sum(len(e.turns) for e in eps) / max(1, len(eps)),
        }
        valid = [e.turns[-1].info["valid"] for e in eps if e.turns and "valid" in e.turns[-1].info]
        if valid:  # environments that grade submissions (mle) report validity per turn
            result["valid_rate"] = sum(map(bool, valid)) / len(valid)
        out = self.run_dir / "eval"
        out.mkdir(exist_ok=True)
        (out / f"{label}.json").write_text(json.dumps(
            {**result, "episodes": [{"task_id": e.task_id, "reward": e.reward,
                                     "turns": [t.action_text for t in e.turns],
                                     "failure": e.failure} for e in eps]}, indent=1))
        return result

    def finish(self, started: float, extra_summary: dict | None = None) -> dict:
        """Final evaluation, checkpoint, plot and summary.json (plus `extra_summary` entries)."""
        final = self.evaluate(f"step_{self.learner.step:06d}")
        self.metrics.log(self.learner.step, {f"eval/{k}": v for k, v in final.items()
                                             if isinstance(v, (int, float))})
        self.checkpoint()
        plot = plot_rewards(self.run_dir)
        before = json.loads((self.run_dir / "eval" / "step_000000.json").read_text()) \
            if (self.run_dir / "eval" / "step_000000.json").exists() else None
        summary = {
            "run_dir": str(self.run_dir), "steps": self.learner.step,
            "episodes": len(self.store), "wall_seconds": time.time() - started,
            "eval_before": before and {k: v for k, v in before.items() if k != "episodes"},
            "eval_after": final, "plot": str(plot), "mode": self.cfg.runtime.mode,
            **(extra_summary or {}),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        self.metrics.close()
        return summary


def open_session(cfg: Config) -> Session:
    run_dir = cfg.run_dir
    if not cfg.run.resume:  # a fresh start in an existing run folder: clear the old run
        for name in ("episodes.jsonl", "consumed.jsonl", "metrics.jsonl", "summary.json"):
            (run_dir / name).unlink(missing_ok=True)
        for name in ("checkpoints", "eval", "tb"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    policy = load_policy(cfg)
    suite = load_suite(cfg)
    learner = Learner(policy, cfg)
    s = Session(cfg=cfg, policy=policy, chat=ChatFormat(policy.tokenizer), suite=suite,
                learner=learner, store=EpisodeStore(run_dir / "episodes.jsonl"),
                metrics=MetricsLogger(run_dir), cursor=TaskCursor(suite.train_tasks, cfg.run.seed))
    ckpt = latest_checkpoint(run_dir / "checkpoints") if cfg.run.resume else None
    if ckpt is not None:
        extra = learner.load(ckpt)
        s.cursor.position = extra.pop("data_position", 0)
        s.consumed = extra.pop("consumed", 0)
        suite_state = extra.pop("suite", None)
        if suite_state is not None and suite.load_state is not None:
            suite.load_state(suite_state)
        s.extra = extra
        log.info("resumed from %s (step %d, %d episodes consumed)", ckpt, learner.step, s.consumed)
    return s
