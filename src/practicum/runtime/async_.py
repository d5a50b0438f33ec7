"""The asynchronous actor-learner runtime: actors never wait for the slowest episode.

    actor threads (runtime.num_actors) --ids--> GenerationServer --batched generate--> Policy
        |  env steps in child processes (ProcessEnv / sandbox): no GIL held while they run
        v
    EpisodeStore.append (fsync) --> GroupBoard: complete GRPO groups, in completion order
        --> learner (main thread): dynamic sampling, staleness policy, Learner.train_step
        --> new weights; actors pick them up at their next turn (each turn records its version)

Staleness is bounded in policy versions, by either policy (runtime.staleness_policy):
`admission` opens no new group while (max_staleness + 1) * tasks_per_step groups are open;
`drop` lets actors run freely and drops, at training time, groups holding a turn more than
max_staleness versions old. The learner corrects the remaining behaviour/learner mismatch with
truncated importance weights or the decoupled objective (algo.off_policy), and weights each
action's loss by its duration (algo.duration_weights, on by default in this mode).

Fault isolation: an environment failure ends one episode (see `ProcessEnv`, `EpisodeBuilder`);
an actor thread that dies is replaced by the pool's supervisor and its episode is stored as a
failure with `rollout.failure_reward`; the learner only ever sees stored, complete groups.

Resume: every finished episode is stored before the learner can take it; the ledger records
what each step consumed, and the checkpoint holds the ledger state and the open groups, so a
resumed run trains every stored, unconsumed episode exactly once (see `runtime.ledger`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import replace
from functools import partial

import torch

from practicum.algo.filters import staleness_mask
from practicum.episode import Episode
from practicum.runtime.actors import ActorPool, ActorState
from practicum.runtime.generation_server import GenerationServer, WeightsGate
from practicum.runtime.groups import Assignment, Group, GroupBoard
from practicum.runtime.ledger import ConsumptionLedger
from practicum.runtime.progress import TrainProgress
from practicum.runtime.rollout import run_episode
from practicum.runtime.session import Session
from practicum.runtime.sync import informative, rollout_metrics

log = logging.getLogger(__name__)


class AsyncRun:
    """The threads, queues and bookkeeping of one asynchronous training run."""

    def __init__(self, s: Session):
        self.s = s
        cfg, rt = s.cfg, s.cfg.runtime
        self.gate = WeightsGate()
        params = s.sampling()
        params = replace(params, stop_token_ids=sorted(set(params.stop_token_ids)
                                                       | set(s.chat.stop_ids())))
        self.server = GenerationServer(s.policy, self.gate, params, seed=cfg.run.seed,
                                       max_batch=max(rt.num_actors, 1))
        max_open = ((rt.max_staleness + 1) * cfg.rollout.tasks_per_step
                    if rt.staleness_policy == "admission" else None)
        self.board = GroupBoard(s.cursor, cfg.rollout.group_size, max_open)
        self.ledger = ConsumptionLedger(s.run_dir / "consumed.jsonl", s.consumed,
                                        s.extra.get("consumed_beyond", ()), step=s.learner.step)
        self.stop_event = threading.Event()
        self.pool = ActorPool(rt.num_actors, self._actor, self._on_actor_death)
        self._lock = threading.Lock()
        self.env_seconds = 0.0
        self.learner_seconds = 0.0
        self.wait_seconds = 0.0
        self.episodes_stored = 0
        self.started_at = 0.0
        self.train_seconds = 0.0
        self._carry_dropped: list[tuple[int, Episode]] = []
        self._restore()

    def _restore(self) -> None:
        s = self.s
        start = self.ledger.watermark
        pending = [(p, e) for p, e in enumerate(s.store.read(start), start)
                   if not self.ledger.is_consumed(p)]
        tasks = {t.task_id: t for t in s.suite.train_tasks}
        open_groups = [tuple(g) for g in s.extra.get("open_groups", ())]
        surplus = set(self.board.restore(open_groups, pending, tasks))
        self._carry_dropped = [(p, e) for p, e in pending if p in surplus]
        if pending:
            log.info("resuming with %d stored, unconsumed episodes", len(pending))

    # -- actors -------------------------------------------------------------------------------
    def _actor(self, st: ActorState) -> None:
        s = self.s
        while not self.stop_event.is_set():
            a = self.board.next_assignment(self.stop_event)
            if a is None:
                return
            st.current = a
            t0, wall0 = time.perf_counter(), time.time()
            st.env = env = s.suite.make_env()
            episode = run_episode(env, a.task, a.group_id, s.chat, s.limits,
                                  partial(self._generate, env))
            st.env = None
            st.busy_seconds += time.perf_counter() - t0
            if self.stop_event.is_set():
                return  # cut short by shutdown: not stored; its group stays open for a resume
            episode.info.update(group_index=a.index, actor=st.actor_id, started=wall0,
                                seconds=time.perf_counter() - t0)
            self._store(a, episode)
            st.current = None
            st.episodes += 1

    def _generate(self, env, ids: list[int]):
        """Sample through the server, adding the env's own stop strings (read after reset)."""
        params, extra = self.server.params, getattr(env, "stop_strings", None)
        if extra:
            params = replace(params, stop_strings=list(dict.fromkeys([*params.stop_strings,
                                                                       *extra])))
        return self.server.generate(ids, params)

    def _store(self, a: Assignment, episode: Episode) -> None:
        position = self.s.store.append([episode]) - 1  # durable before the learner can see it
        with self._lock:
            self.env_seconds += episode.env_duration
            self.episodes_stored += 1
        self.board.finish(a, episode, position)

    def _on_actor_death(self, st: ActorState, error: BaseException) -> None:
        kill = getattr(st.env, "kill", None)
        if kill is not None:
            kill()
        a = st.current
        if a is None or self.stop_event.is_set():
            return
        reason = f"actor died: {type(error).__name__}: {error}"
        episode = Episode(task_id=a.task.task_id, group_id=a.group_id, prompt_ids=[],
                          reward=self.s.cfg.rollout.failure_reward, failure=reason,
                          episode_id=uuid.uuid4().hex,
                          info={"traceback": st.error_trace, "group_index": a.index,
                                "actor": st.actor_id})
        self._store(a, episode)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "AsyncRun":
        self.started_at = time.perf_counter()
        self.server.start()
        self.pool.start()
        return self

    def stop(self) -> None:
        """Stop actors (killing environments in flight) and the generation server."""
        if self.stop_event.is_set():
            return
        self.pool.stopping.set()  # actors now leave on purpose: not deaths to restart
        self.stop_event.set()
        self.board.close()
        self.server.stop()
        self.pool.stop()
        self.train_seconds = time.perf_counter() - self.started_at
        self.save_state()

    def save_state(self) -> None:
        """Put the ledger and open groups where `Session.checkpoint` saves them."""
        self.s.consumed = self.ledger.watermark
        self.s.extra.update(self.ledger.state(), open_groups=self.board.open_groups())

    def checkpoint(self) -> None:
        with self.board.frozen():  # no group opens or completes while the state is saved
            self.save_state()
            self.s.checkpoint()

    # -- learner ------------------------------------------------------------------------------
    def _stale(self, g: Group) -> bool:
        versions = [t.policy_version for e in g.episodes for t in e.turns]
        if not versions:
            return False
        keep = staleness_mask(torch.tensor(versions), self.s.policy.version,
                              self.s.cfg.runtime.max_staleness)
        return not bool(keep.all())

    def next_batch(self) -> tuple[list[Group], list[Group], list[Group]]:
        """Complete groups in completion order until tasks_per_step informative ones, or the
        dynamic-sampling budget (tasks_per_step * (1 + max_refill_rounds) groups) is spent, as
        in the sync loop. Stale groups (drop policy) do not count against the budget."""
        cfg = self.s.cfg
        want = cfg.rollout.tasks_per_step
        algo = cfg.algo
        budget = want * (1 + algo.max_refill_rounds) if algo.dynamic_sampling else want
        trained: list[Group] = []
        filtered: list[Group] = []
        dropped: list[Group] = []
        while len(trained) < want and len(trained) + len(filtered) < budget:
            g = self.board.take(timeout=1.0)
            if g is None:
                if not self.server.alive:
                    raise RuntimeError("the generation server thread died; see the log")
                continue
            if cfg.runtime.staleness_policy == "drop" and self._stale(g):
                dropped.append(g)
            elif algo.dynamic_sampling and not informative(g.episodes):
                filtered.append(g)
            else:
                trained.append(g)
        return trained, filtered, dropped

    def train_step(self) -> dict[str, float]:
        s = self.s
        t0 = time.perf_counter()
        trained, filtered, dropped = self.next_batch()
        waited = time.perf_counter() - t0
        batch = [e for g in trained for e in g.episodes]
        version = s.policy.version
        lag = [version - t.policy_version for e in batch for t in e.turns]
        t1 = time.perf_counter()
        with self.gate.updating():  # weights change only between generate calls
            metrics = s.learner.train_step(batch) if batch else {"skipped": 1.0}
        if not batch:
            s.learner.step += 1  # nothing informative: count the step, keep the weights
        trained_s = time.perf_counter() - t1
        self.wait_seconds += waited
        self.learner_seconds += trained_s
        self.ledger.record(s.learner.step, trained=_members(trained),
                           filtered=_members(filtered),
                           dropped=_members(dropped) + self._carry_dropped)
        self._carry_dropped = []
        s.consumed = self.ledger.watermark
        seen = batch + [e for g in filtered for e in g.episodes]
        metrics.update(rollout_metrics(seen))
        metrics.update(self.runtime_metrics())
        metrics.update({
            "batch_episodes": float(len(batch)), "groups_filtered": float(len(filtered)),
            "groups_dropped": float(len(dropped)), "wait_seconds": waited,
            "rollout_seconds": waited, "train_seconds": trained_s,
            "step_seconds": time.perf_counter() - t0, "policy_version": float(s.policy.version),
            "staleness_mean": sum(lag) / len(lag) if lag else 0.0,
            "staleness_max": float(max(lag, default=0)),
        })
        return metrics

    def runtime_metrics(self) -> dict[str, float]:
        """Cumulative utilisation since start (actors: inside episodes; env: in env steps)."""
        elapsed = max(1e-9, time.perf_counter() - self.started_at)
        n = self.s.cfg.runtime.num_actors
        return {
            "actor_utilisation": self.pool.utilisation(),
            "env_utilisation": self.env_seconds / (elapsed * n),
            "learner_utilisation": self.learner_seconds / elapsed,
            "generation_utilisation": self.server.busy_seconds / elapsed,
            "generation_batch_mean": self.server.prompts / max(1, self.server.rounds),
            "actor_restarts": float(self.pool.restarts),
            "episodes_stored": float(self.episodes_stored),
            **self.board.counts(),
        }

    def stats(self) -> dict[str, float]:
        """Run-level figures for summary.json and benchmarks."""
        return {**self.runtime_metrics(), "train_seconds": self.train_seconds,
                "learner_seconds": self.learner_seconds, "wait_seconds": self.wait_seconds,
                "env_seconds": self.env_seconds, "generation_seconds": self.server.busy_seconds,
                "num_actors": float(self.s.cfg.runtime.num_actors)}


def _members(groups: list[Group]) -> list[tuple[int, Episode]]:
    return [m for g in groups for m in g.members]


def run_async(s: Session, progress: bool = True) -> dict:
    """Train to cfg.train.steps with asynchronous actors (same contract as `run_sync`)."""
    cfg = s.cfg
    started = time.time()
    if s.learner.step == 0 and not (s.run_dir / "eval" / "step_000000.json").exists():
        before = s.evaluate("step_000000")
        s.metrics.log(0, {f"eval/{k}": v for k, v in before.items() if isinstance(v, (int, float))})
    run = AsyncRun(s)
    if s.learner.step < cfg.train.steps:
        run.start()
        try:
            with TrainProgress(cfg.train.steps, s.learner.step, enabled=progress) as bar:
                while s.learner.step < cfg.train.steps:
                    metrics = run.train_step()
                    step = s.learner.step
                    if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.train.steps:
                        with run.gate.updating():  # the policy serves one caller at a time
                            ev = s.evaluate(f"step_{step:06d}")
                        metrics.update({f"eval/{k}": v for k, v in ev.items()
                                        if isinstance(v, (int, float))})
                    s.metrics.log(step, metrics)
                    if step % cfg.train.checkpoint_every == 0:
                        run.checkpoint()
                    bar.update(step, metrics)
        finally:
            run.stop()
    run.save_state()
    return s.finish(started, extra_summary={"async": run.stats()})
