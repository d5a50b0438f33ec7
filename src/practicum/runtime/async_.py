"""The asynchronous batch source: actors never wait for the slowest episode.

    actor threads (runtime.num_actors) --ids--> GenerationServer --batched generate--> sampler
        |  env steps (in child processes where the env says so): no GIL held while they run
        v
    EpisodeStore.append (fsync) --> GroupBoard (runtime.groups)
        --> next_batch (learner thread): complete groups or the first episodes to finish,
            the staleness bound, dynamic sampling
        --> learner update, new weights; actors pick them up at their next turn (each turn
            records its version). Actors keep sampling the old version during the update,
            unless the sampler runs the module being trained (`GenerationServer.training`)

Batching (`rollout.batching`): `groups` trains on complete groups in completion order (GRPO
advantages; no duration bias, since a group's make-up does not depend on completion order);
`streaming` trains on the first group_size * tasks_per_step episodes to finish, whatever their
group, with a per-task running baseline (the paper's actors feeding one learner).

Staleness (`runtime.staleness_policy`): `admission` caps open groups at (max_staleness + 1) *
tasks_per_step, makes the batch at version V wait for every group opened at version
V - max_staleness, and lets no group open whose deadline batch is already complete, so no
token is trained more than max_staleness versions after it was sampled (`runtime.groups`);
`drop` lets actors run freely and discards, at training time, groups (or episodes) holding an
older turn. Turns sampled during an update carry the version before it, and the board
learns a new version only after the sampler holds it (`after_update`), so a group's version
stays a lower bound on its turns' and both policies bound them too. The learner corrects the
remaining behaviour/learner mismatch with algo.off_policy.

Faults: an environment failure ends one episode; an actor thread that dies is replaced by the
pool's supervisor and its episode is stored as a failure; the learner only sees stored
episodes. Shutdown (`stop`) is prompt: environments in flight are killed (a sandboxed run is
cancelled), an actor waiting for generation stops waiting (its request is withdrawn unless
already sampling), and the episodes cut short are not stored: their groups stay open, so a
resume re-runs those slots. Resume: the checkpoint holds the open groups (with their
versions); the store and the ledger say what was finished and consumed, so every stored,
unconsumed episode is trained or discarded exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait

import torch

from practicum.algo.filters import staleness_mask
from practicum.episode import Episode
from practicum.runtime.actors import ActorPool, ActorState
from practicum.runtime.groups import Assignment, GroupBoard
from practicum.runtime.loop import Batch, Stored
from practicum.runtime.session import Session
from practicum.runtime.sync import informative_split

log = logging.getLogger(__name__)


class AsyncBatches:
    """The threads, board and bookkeeping of one asynchronous run (module doc)."""

    def __init__(self, s: Session):
        self.s = s
        cfg, rt = s.cfg, s.cfg.runtime
        admission = rt.staleness_policy == "admission"
        max_open = (rt.max_staleness + 1) * cfg.rollout.tasks_per_step if admission else None
        self.board = GroupBoard(
            s.cursor,
            cfg.rollout.group_size,
            max_open,
            version=s.learner.step,
            max_staleness=rt.max_staleness if admission else None,
        )
        self.stop_event = threading.Event()
        self._stopped: Future = Future()
        """Done once stopping: actors waiting for generation wake on it."""
        self.pool = ActorPool(rt.num_actors, self._actor, self._on_actor_death)
        self._lock = threading.Lock()
        self.env_seconds = self.wait_seconds = 0.0
        self.episodes_stored = 0
        self.started_at = 0.0
        self.train_seconds = 0.0
        """Runtime start to stop (the training loop's wall time)."""
        self._carry_dropped: Stored = []
        self._restore()

    def _restore(self) -> None:
        s = self.s
        open_groups = [
            tuple(g) if len(g) == 3 else (g[0], g[1], s.learner.step)
            for g in s.extra.get("open_groups", ())
        ]
        open_ids = {f"g{i}/{t}" for i, t, _ in open_groups}
        stored = [
            (p, e, s.ledger.is_consumed(p))
            for p, e in enumerate(s.store)
            if e.group_id in open_ids or not s.ledger.is_consumed(p)
        ]
        tasks = {t.task_id: t for t in s.suite.train_tasks}
        self._carry_dropped = self.board.restore(open_groups, stored, tasks)
        pending = sum(not consumed for *_, consumed in stored)
        if pending:
            log.info("resuming with %d stored, unconsumed episodes", pending)

    # -- actors ---------------------------------------------------------------------------------
    def _actor(self, st: ActorState) -> None:
        s = self.s
        while not self.stop_event.is_set():
            a = self.board.next_assignment(self.stop_event)
            if a is None:
                return
            st.current = a
            t0, wall0 = time.perf_counter(), time.time()
            builder = s.builder(a.task, a.group_id, a.slot)
            st.env = builder.env
            if self.stop_event.is_set():  # stopped during the reset: the kill may have missed
                if not builder.done:  # (a failed reset closed it already)
                    builder.env.close()
                return
            episode = builder.run(self._generate)
            st.env = None
            st.busy_seconds += time.perf_counter() - t0
            if self.stop_event.is_set():
                return  # cut short by shutdown: not stored; its slot is re-run after a resume
            episode.info.update(actor=st.actor_id, started=wall0, seconds=time.perf_counter() - t0)
            self._store(a, episode)
            st.current = None
            st.episodes += 1

    def _generate(self, ids: list[int], params, seed: int | None):
        """`GenerationServer.generate` that gives up once the runtime stops: the request is
        withdrawn (unless already sampling) and CancelledError ends the episode."""
        future = self.s.server.submit(ids, params, seed)
        wait([future, self._stopped], return_when=FIRST_COMPLETED)
        if not future.done() and self.stop_event.is_set():
            future.cancel()
            raise CancelledError("the async runtime stopped")
        return future.result()

    def _store(self, a: Assignment, episode: Episode) -> None:
        position = self.s.store.append([episode]) - 1  # durable before the learner can see it
        with self._lock:
            self.env_seconds += episode.env_duration
            self.episodes_stored += 1
        self.board.finish(a, episode, position)

    def _on_actor_death(self, st: ActorState, error: BaseException) -> None:
        if st.env is not None:
            st.env.kill()
        a = st.current
        if a is None or self.stop_event.is_set():
            return
        reason = f"actor died: {type(error).__name__}: {error}"
        episode = Episode(
            task_id=a.task.task_id,
            group_id=a.group_id,
            prompt_ids=[],
            reward=self.s.cfg.rollout.failure_reward,
            failure=reason,
            episode_id=uuid.uuid4().hex,
            info={"traceback": st.error_trace, "slot": a.slot, "actor": st.actor_id},
        )
        self._store(a, episode)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self.started_at = time.perf_counter()
        self.pool.start()

    def stop(self) -> None:
        """Stop actors, killing environments in flight."""
        if self.stop_event.is_set():
            return
        self.pool.stopping.set()  # actors now leave on purpose: not deaths to restart
        self.stop_event.set()
        self._stopped.set_result(None)
        self.board.close()
        self.pool.stop()
        self.train_seconds = time.perf_counter() - self.started_at

    def state(self) -> dict:
        return {"open_groups": [list(g) for g in self.board.open_groups()]}

    def frozen(self):
        return self.board.frozen()

    def after_update(self, version: int) -> None:
        self.board.set_version(version)

    # -- learner --------------------------------------------------------------------------------
    def next_batch(self) -> Batch:
        t0 = time.perf_counter()
        self.board.unseal()
        if self.s.cfg.rollout.batching == "streaming":
            batch = self._streaming_batch()
        else:
            batch = self._group_batch()
        batch.dropped += self._carry_dropped
        self._carry_dropped = []
        waited = time.perf_counter() - t0
        self.wait_seconds += waited
        version = self.s.learner.step
        lag = [version - t.policy_version for _, e in batch.trained for t in e.turns]
        batch.metrics.update(self.runtime_metrics())
        batch.metrics.update(
            {
                "wait_seconds": waited,
                "rollout_seconds": waited,
                "staleness_mean": sum(lag) / len(lag) if lag else 0.0,
                "staleness_max": float(max(lag, default=0)),
            }
        )
        return batch

    def _stale(self, episodes: list[Episode]) -> bool:
        """drop policy: whether any turn is more than max_staleness versions old."""
        rt = self.s.cfg.runtime
        versions = [t.policy_version for e in episodes for t in e.turns]
        if rt.staleness_policy != "drop" or not versions:
            return False
        keep = staleness_mask(torch.tensor(versions), self.s.learner.step, rt.max_staleness)
        return not bool(keep.all())

    def _group_batch(self) -> Batch:
        """Complete groups: every group due at this version (admission), and others in
        completion order until tasks_per_step informative ones, or the dynamic-sampling budget
        (tasks_per_step * (1 + max_refill_rounds) groups) is spent."""
        cfg = self.s.cfg
        want = cfg.rollout.tasks_per_step
        algo = cfg.algo
        budget = want * (1 + algo.max_refill_rounds) if algo.dynamic_sampling else want
        batch = Batch([])
        n_trained = n_filtered = 0
        while True:
            enough = n_trained >= want or n_trained + n_filtered >= budget
            if enough:
                self.board.seal()
            due = self.board.due()
            if enough and not due:
                return batch
            g = self._take(lambda due=due: self.board.take_group(timeout=1.0, only=due or None))
            if self._stale(g.episodes):
                batch.dropped += g.members
                continue
            keep, drop = informative_split(g.members) if algo.dynamic_sampling else (g.members, [])
            batch.trained += keep
            batch.filtered += drop
            n_trained += bool(keep)
            n_filtered += bool(drop)

    def _streaming_batch(self) -> Batch:
        """The first group_size * tasks_per_step episodes to finish, and every remaining
        episode of the groups due at this version (waited for)."""
        cfg = self.s.cfg
        n = cfg.rollout.group_size * cfg.rollout.tasks_per_step
        batch = Batch([])
        while True:
            enough = len(batch.trained) + len(batch.dropped) >= n
            if enough:
                self.board.seal()
            due = self.board.due()
            if enough and not due:
                return batch
            _, pos, e = self._take(
                lambda due=due: self.board.take_episode(timeout=1.0, only=due or None)
            )
            (batch.dropped if self._stale([e]) else batch.trained).append((pos, e))

    def _take(self, take):
        """Call `take` until it returns something, checking the runtime is alive meanwhile."""
        while True:
            got = take()
            if got is not None:
                return got
            if not self.s.server.alive:
                raise RuntimeError("the generation server thread died; see the log")
            if self.stop_event.is_set():
                raise RuntimeError("the async runtime stopped while the learner waited")

    def runtime_metrics(self) -> dict[str, float]:
        """Cumulative utilisation since start (actors: inside episodes; env: in env steps)."""
        elapsed = max(1e-9, time.perf_counter() - self.started_at)
        server = self.s.server
        return {
            "actor_utilisation": self.pool.utilisation(),
            "env_utilisation": self.env_seconds / (elapsed * self.s.cfg.runtime.num_actors),
            "generation_utilisation": server.busy_seconds / elapsed,
            "generation_batch_mean": server.prompts / max(1, server.rounds),
            "actor_restarts": float(self.pool.restarts),
            "episodes_stored": float(self.episodes_stored),
            **self.board.counts(),
        }

    def summary(self) -> dict:
        return {
            "async": {
                **self.runtime_metrics(),
                "train_seconds": self.train_seconds,
                "wait_seconds": self.wait_seconds,
                "env_seconds": self.env_seconds,
                "generation_seconds": self.s.server.busy_seconds,
                "num_actors": float(self.s.cfg.runtime.num_actors),
            }
        }
