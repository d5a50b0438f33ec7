"""The synchronous batch source: sample groups together, score them, refill, hand them over.

Each batch draws `tasks_per_step` tasks from the cursor, runs `group_size` episodes of each in
lockstep, and stores them before anything trains on them. With dynamic sampling (DAPO),
groups whose rewards are all equal are set aside and up to `max_refill_rounds` more rounds
draw new tasks for the missing groups.

Exact resume: every stored episode carries its batch number, round and the cursor position the
round started at. A resumed run replays the stored rounds of the interrupted batches (the
ledger cut them back to the checkpoint) instead of sampling them again, puts the cursor where
they left it, and samples only what was never stored; episode seeds come from group ids, so a
round lost with the crash is sampled again identically.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from practicum.algo.filters import informative_groups
from practicum.batch import group_index
from practicum.episode import Episode
from practicum.runtime.groups import group_id
from practicum.runtime.loop import Batch
from practicum.runtime.session import Session

Stored = list[tuple[int, Episode]]


def informative_split(items: Stored) -> tuple[Stored, Stored]:
    """DAPO dynamic sampling: (members of groups whose rewards differ, the rest)."""
    if not items:
        return [], []
    eps = [e for _, e in items]
    keep = informative_groups(torch.tensor([e.reward for e in eps]), group_index(eps)).tolist()
    return ([x for x, k in zip(items, keep) if k], [x for x, k in zip(items, keep) if not k])


class SyncBatches:
    def __init__(self, s: Session):
        self.s = s
        self._stored: dict[int, dict[int, Stored]] = {}  # batch -> round -> stored episodes
        start = s.ledger.watermark
        for pos, e in enumerate(s.store.read(start), start):
            if not s.ledger.is_consumed(pos) and "batch" in e.info:
                self._stored.setdefault(e.info["batch"], {}).setdefault(e.info["round"], []).append(
                    (pos, e)
                )

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def state(self) -> dict:
        return {}

    def frozen(self):
        return nullcontext()

    def after_update(self, version: int) -> None:
        pass

    def summary(self) -> dict:
        return {}

    def next_batch(self) -> Batch:
        s, cfg = self.s, self.s.cfg
        t0 = time.perf_counter()
        number = s.ledger.batches + 1
        stored = self._stored.pop(number, {})
        want, size = cfg.rollout.tasks_per_step, cfg.rollout.group_size
        rounds = 1 + (cfg.algo.max_refill_rounds if cfg.algo.dynamic_sampling else 0)
        trained: Stored = []
        filtered: Stored = []
        dropped: Stored = []
        for round_ in range(rounds):
            missing = want - len({e.group_id for _, e in trained})
            if missing <= 0:
                break
            got = stored.get(round_, [])
            if got and len(got) == missing * size:  # replay what a crashed run stored
                s.cursor.position = got[0][1].info["cursor_after"]
            else:  # sample (again, when a crash left the round incomplete)
                dropped += got
                if got:
                    s.cursor.position = got[0][1].info["cursor"]
                got = self._sample(number, round_, missing)
            keep, drop = informative_split(got) if cfg.algo.dynamic_sampling else (got, [])
            trained += keep
            filtered += drop
        return Batch(trained, filtered, dropped, {"rollout_seconds": time.perf_counter() - t0})

    def _sample(self, number: int, round_: int, n_groups: int) -> Stored:
        s, size = self.s, self.s.cfg.rollout.group_size
        cursor = s.cursor.position
        draws = s.cursor.take(n_groups)
        items = [
            (task, group_id(i, task.task_id), slot) for i, task in draws for slot in range(size)
        ]
        eps = s.rollout(items)
        for e in eps:
            e.info.update(batch=number, round=round_, cursor=cursor, cursor_after=s.cursor.position)
        end = s.store.append(eps)  # persisted before anything trains on it
        return list(zip(range(end - len(eps), end), eps))
