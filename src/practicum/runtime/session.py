"""A training session: the run's state and the handles on its placed parts, resumed from the
run folder.

    Placement (learner + sampler + envs, `runtime.placement`) -> GenerationServer (batches
        every generate call), ModelService (environments' own LLM calls, through the server)
    Suite (registered environment: env factory, train/held-out tasks)
    AgentEndpoint (rollout.agent: outside agents' calls reach the server through it)
    run state: EpisodeStore + ConsumptionLedger, MetricsLogger, TaskCursor (+ curriculum)

Both runtimes (sync, async) use it through `runtime.loop.train`; so do `practicum eval` and
`practicum rft`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from practicum.agent.endpoint import AgentEndpoint
from practicum.agent.runner import AgentEpisode
from practicum.algo.baselines import TaskBaselines
from practicum.batch import rl_batch
from practicum.config import Config, dump_config
from practicum.engine.base import SamplingParams, Trainable, derive_seed
from practicum.engine.chat import ChatFormat
from practicum.engine.server import GenerationServer
from practicum.engine.service import ModelService
from practicum.envs.base import Task
from practicum.envs.registry import Suite, SuiteContext, build_suite
from practicum.episode import Episode
from practicum.learner import latest_checkpoint, read_trainer_state
from practicum.report import MetricsLogger, episode_metrics, plot_rewards
from practicum.runtime.cursor import Curriculum, TaskCursor
from practicum.runtime.parts import Learner
from practicum.runtime.placement import Placement, place, place_envs
from practicum.runtime.rollout import EpisodeBuilder, RolloutLimits, rollout_batch
from practicum.store import ConsumptionLedger, EpisodeStore

log = logging.getLogger(__name__)

RUN_FILES = (
    "episodes.jsonl",
    "consumed.jsonl",
    "metrics.jsonl",
    "summary.json",
    "progress.log",
    "agent_requests.jsonl",
)
RUN_FOLDERS = ("checkpoints", "eval", "tb")


@dataclass
class Session:
    cfg: Config
    placement: Placement
    server: GenerationServer
    models: ModelService
    chat: ChatFormat
    suite: Suite
    store: EpisodeStore
    ledger: ConsumptionLedger
    metrics: MetricsLogger
    cursor: TaskCursor
    curriculum: Curriculum
    extra: dict = field(default_factory=dict)
    """The batch source's state from the checkpoint (e.g. the async runtime's open groups)."""
    skipped_batches: int = 0
    """Batches with nothing to train on, over the whole run (kept in checkpoints)."""
    baselines: TaskBaselines = field(default_factory=TaskBaselines)
    """Per-task running baselines (algo.advantage = baseline), kept in checkpoints."""
    agents: AgentEndpoint | None = None
    """The endpoint outside agents call (`rollout.agent`); None: the environment's own turns."""

    @property
    def learner(self) -> Learner:
        return self.placement.learner

    @property
    def trainable(self) -> Trainable:
        """The in-process trainable (RFT); a learner placed elsewhere refuses with one line."""
        return self.placement.learner.trainable

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
        return SamplingParams(
            temperature=t, top_p=s.top_p if t > 0 else 1.0, max_new_tokens=s.max_new_tokens
        )

    def builder(
        self, task: Task, gid: str, slot: int, temperature: float | None = None
    ) -> EpisodeBuilder | AgentEpisode:
        """A new episode of `task` as slot `slot` of group `gid`, in a fresh environment (an
        outside agent's, with `rollout.agent`); `.run(generate)` runs it."""
        env = self.suite.make_env(self.models)
        if self.agents is not None:
            return AgentEpisode(
                env,
                task,
                gid,
                slot,
                self.agents,
                self.cfg.rollout.agent,
                derive_seed(self.cfg.run.seed, gid, slot),
                self.cfg.rollout.failure_reward,
                self.sampling(temperature).temperature,
            )
        return EpisodeBuilder(
            env,
            task,
            gid,
            slot,
            self.chat,
            self.limits,
            self.sampling(temperature),
            self.cfg.run.seed,
        )

    def rollout(
        self,
        items: list[tuple[Task, str, int]],
        temperature: float | None = None,
        on_episode: Callable[[Episode], None] | None = None,
    ) -> list[Episode]:
        """One episode per (task, group id, slot), all in lockstep (outside agents: side by
        side, `rollout.env_workers` at once, their calls batched by the server);
        `on_episode` is called as each one ends (progress)."""
        builders = [self.builder(t, g, k, temperature) for t, g, k in items]
        if self.agents is not None:

            def run(builder) -> Episode:
                episode = AgentEpisode.run(builder)
                if on_episode is not None:
                    on_episode(episode)
                return episode

            with ThreadPoolExecutor(self.cfg.rollout.env_workers) as pool:
                try:
                    return list(pool.map(run, builders))
                except BaseException:  # interrupted: stop the agents now, not at their limit
                    for b in builders:
                        b.env.kill()
                    raise
        return rollout_batch(self.server, builders, self.cfg.rollout.env_workers, on_episode)

    def train_step(self, episodes: list[Episode]) -> dict | None:
        """One RL step on `episodes`: the driver builds the rows (`rl_batch`), the learner
        trains on them; its metrics plus the driver's, or None when no row had a token to
        train on (no step taken)."""
        built = rl_batch(episodes, self.cfg, self.baselines)
        if built is None:
            return None
        batch, metrics = built
        out = self.learner.train_step(batch)
        return None if out is None else {**out, **metrics}

    def publish(self) -> None:
        """Give the sampler the learner's weights as version `learner.step`."""
        update = self.learner.export_weights(self.learner.step)
        with self.server.updating():  # no sampling while the sampler's weights change
            self.server.publish(update)

    @property
    def eval_tasks(self) -> list[Task]:
        """The held-out tasks an evaluation runs (eval.size of them)."""
        return self.suite.eval_tasks[: self.cfg.eval.size or None]

    def evaluate(self, label: str, on_episode: Callable[[Episode], None] | None = None) -> dict:
        """Held-out evaluation (greedy by default): one episode per held-out task, seeded by
        the task alone so evaluations at different steps face the same draws."""
        ev = self.cfg.eval
        tasks = self.eval_tasks
        eps = self.rollout([(t, f"eval/{t.task_id}", 0) for t in tasks], ev.temperature, on_episode)
        result = {
            "label": label,
            "policy_version": self.server.version,
            "tasks": len(eps),
            **episode_metrics(eps, self.cfg.curriculum.solved_reward),
        }
        out = self.run_dir / "eval"
        out.mkdir(exist_ok=True)
        (out / f"{label}.json").write_text(
            json.dumps(
                {
                    **result,
                    "episodes": [
                        {
                            "task_id": e.task_id,
                            "reward": e.reward,
                            "solved": e.solved,
                            "metrics": e.metrics,
                            "turns": [t.action_text for t in e.turns],
                            "failure": e.failure,
                        }
                        for e in eps
                    ],
                },
                indent=1,
            )
        )
        return result

    def checkpoint(self, source_state: dict | None = None) -> Path:
        if source_state is not None:
            self.extra = dict(source_state)
        state = {
            "cursor": self.cursor.position,
            "ledger": self.ledger.state(),
            "curriculum": self.curriculum.state(),
            "skipped_batches": self.skipped_batches,
            "baselines": self.baselines.state_dict(),
            "source": self.extra,
        }
        if self.suite.state is not None:
            state["suite"] = self.suite.state()
        return self.learner.save(self.run_dir / "checkpoints", state)

    def finish(
        self, started: float, extra_summary: dict | None = None, final: dict | None = None
    ) -> dict:
        """Final evaluation (unless the caller ran it: `final`), checkpoint, plot and
        summary.json (plus `extra_summary` entries)."""
        final = final or self.evaluate(f"step_{self.learner.step:06d}")
        self.metrics.log(
            self.learner.step,
            {f"eval/{k}": v for k, v in final.items() if isinstance(v, (int, float))},
        )
        self.checkpoint()
        plot = plot_rewards(self.run_dir)
        before_file = self.run_dir / "eval" / "step_000000.json"
        before = json.loads(before_file.read_text()) if before_file.exists() else None
        summary = {
            "run_dir": str(self.run_dir),
            "steps": self.learner.step,
            "episodes": len(self.store),
            "skipped_batches": self.skipped_batches,
            "wall_seconds": time.time() - started,
            "eval_before": before and {k: v for k, v in before.items() if k != "episodes"},
            "eval_after": final,
            "plot": str(plot),
            "mode": self.cfg.runtime.mode,
            "placement": self.cfg.placement.kind,
            **self.placement.summary(),
            **(extra_summary or {}),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    def close(self) -> None:
        if self.agents is not None:
            self.agents.stop()
        self.server.stop()
        self.metrics.close()
        self.placement.close()  # Ray actors, vLLM's files


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
    placement = place(cfg, suite)
    r = cfg.rollout
    server = GenerationServer(
        placement.sampler,
        max_batch=max(64, r.group_size * r.tasks_per_step, cfg.runtime.num_actors),
    ).start()
    try:
        place_envs(placement, cfg, suite, ctx)
    except BaseException:
        server.stop()
        placement.close()
        raise
    chat = ChatFormat(placement.tokenizer)
    agents = None
    if r.agent is not None:
        log_file = run_dir / "agent_requests.jsonl" if r.agent.request_log else None
        try:
            positions = getattr(placement.sampler, "max_positions", None) or r.max_seq_len
            agents = AgentEndpoint(
                server,
                chat,
                cfg.run.name,
                min(r.max_seq_len, positions),
                cfg.sampling.temperature,
                log_file,
            ).start()
        except BaseException:
            server.stop()
            placement.close()
            raise
    curriculum = Curriculum(cfg.curriculum)
    ckpt = latest_checkpoint(run_dir / "checkpoints") if cfg.run.resume else None
    trainer_state = read_trainer_state(ckpt) if ckpt else {}
    state = trainer_state.get("extra", {})
    s = Session(
        cfg=cfg,
        placement=placement,
        server=server,
        models=ModelService(server, chat, cfg.model.dtype),
        chat=chat,
        suite=suite,
        store=EpisodeStore(run_dir / "episodes.jsonl"),
        ledger=ConsumptionLedger.resume(run_dir / "consumed.jsonl", state.get("ledger")),
        metrics=MetricsLogger(run_dir),
        cursor=TaskCursor(suite.train_tasks, cfg.run.seed, curriculum=curriculum),
        curriculum=curriculum,
        baselines=TaskBaselines(cfg.algo.baseline_window),
        agents=agents,
    )
    if ckpt is not None:
        s.learner.load(ckpt)
        s.cursor.position = state["cursor"]
        s.curriculum.load_state(state["curriculum"])
        s.skipped_batches = state.get("skipped_batches", 0)
        # older checkpoints kept the baselines in the learner's state
        baselines = state.get("baselines", trainer_state.get("baselines"))
        if baselines is not None:
            s.baselines.load_state_dict(baselines)
        if state.get("suite") is not None and suite.load_state is not None:
            suite.load_state(state["suite"])
        s.extra = state.get("source", {})
        s.publish()
        log.info("resumed from %s (step %d, %d batches)", ckpt, s.learner.step, s.ledger.batches)
    return s
