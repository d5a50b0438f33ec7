"""Episode slots for actors, finished episodes for the learner, and the staleness bound.

A group is one task drawn from the task cursor and sampled `group_size` times (one slot per
episode). Actors ask `next_assignment` for a slot: a free slot of an open group (oldest group
first), else a new group. Finished, stored episodes come back through `finish`. The learner
takes them in one of two ways (`rollout.batching`):

* complete groups (`take_group`): a group whose members are all in, in completion order; fast
  episodes cannot crowd slow ones out of a group's baseline;
* streaming (`take_episode`): single finished episodes in completion order.

Staleness (runtime.staleness_policy = admission, as AReaL's max_head_offpolicyness, arXiv
2505.24298, made strict): every group records the policy version v it was opened at; no token
sampled for it can be older, so training it by the batch at version v + max_staleness (its
deadline) bounds every sample's staleness. The learner's batch at version V takes every open
group whose deadline is V (`due`), waiting for it if need be; once the batch has what it needs
it is sealed (`seal`), and no group whose deadline is a sealed batch may open any more (with
max_staleness = 0: none until the next version). Besides, at most (max_staleness + 1) *
tasks_per_step groups are open at once, so sampling never runs far ahead. Nothing is
discarded.

Group ids are `g{index}/{task_id}` with `index` the cursor position that opened the group, so a
resumed run re-opens the same groups and finds their members already in the store.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, TypeVar

from practicum.envs.base import Task
from practicum.episode import Episode
from practicum.runtime.cursor import TaskCursor

T = TypeVar("T")


def group_id(index: int, task_id: str) -> str:
    return f"g{index}/{task_id}"


def group_index_of(gid: str) -> int:
    head = gid.split("/", 1)[0]
    if not head.startswith("g") or not head[1:].isdigit():
        raise ValueError(f"episode group id {gid!r} is not a group id (g<index>/<task>)")
    return int(head[1:])


@dataclass
class Assignment:
    """One episode to run: slot `slot` of group `group_id`."""

    group_id: str
    index: int
    task: Task
    slot: int


@dataclass
class Group:
    index: int
    task: Task
    size: int
    version: int = 0
    """Policy version when the group opened: a lower bound on every turn's version."""
    slots_taken: set[int] = field(default_factory=set)
    """Slots handed to actors (or restored from the store)."""
    members: list[tuple[int, Episode]] = field(default_factory=list)
    """(store position, episode) of finished members not yet taken, in completion order."""
    taken: int = 0
    """Members the learner has taken (streaming takes them one by one)."""

    @property
    def gid(self) -> str:
        return group_id(self.index, self.task.task_id)

    @property
    def complete(self) -> bool:
        return len(self.members) == self.size

    @property
    def done(self) -> bool:
        return self.taken == self.size

    @property
    def episodes(self) -> list[Episode]:
        return [e for _, e in self.members]


class GroupBoard:
    def __init__(
        self,
        cursor: TaskCursor,
        group_size: int,
        max_open: int | None = None,
        version: int = 0,
        max_staleness: int | None = None,
    ):
        """max_open / max_staleness None: no admission control (the drop policy)."""
        self.cursor, self.group_size, self.max_open = cursor, group_size, max_open
        self.max_staleness = max_staleness
        self.version = version
        """The learner's current policy version (`set_version` after every update)."""
        self.sealed = version - 1
        """The last version whose batch is complete: no group may take it as its deadline."""
        self._cond = threading.Condition()
        self._open: dict[str, Group] = {}
        self._finished: list[tuple[Group, int, Episode]] = []  # completion order
        self._restored: set[str] = set()
        self._closed = False
        self.groups_opened = 0

    # -- resume ---------------------------------------------------------------------------------
    def restore(
        self,
        open_groups: list[tuple[int, str, int]],
        stored: list[tuple[int, Episode, bool]],
        tasks_by_id: dict[str, Task],
    ) -> list:
        """Re-open the groups a checkpoint left open (index, task id, version) and those of
        stored, unconsumed episodes. `stored`: (position, episode, consumed) for every stored
        episode of those groups: consumed ones count as taken, the others as finished. Returns
        the (position, episode) surplus (more members than a group holds) for the caller to
        mark consumed."""
        wanted = {group_id(i, t): (i, t, v) for i, t, v in open_groups}
        for _, e, consumed in stored:
            if not consumed:
                wanted.setdefault(e.group_id, (group_index_of(e.group_id), e.task_id, self.version))
        surplus = []
        with self._cond:
            for gid, (index, task_id, version) in sorted(wanted.items(), key=lambda kv: kv[1][0]):
                if task_id not in tasks_by_id:
                    raise ValueError(
                        f"cannot resume group {gid}: task {task_id!r} is not in the "
                        f"training tasks any more"
                    )
                self._open[gid] = Group(index, tasks_by_id[task_id], self.group_size, version)
                self._restored.add(gid)
            for pos, e, consumed in sorted(stored, key=lambda x: x[0]):
                g = self._open.get(e.group_id)
                if g is None:
                    continue
                slot = e.info.get("slot")
                if len(g.slots_taken) >= g.size or slot in g.slots_taken:
                    if not consumed:
                        surplus.append((pos, e))
                    continue
                g.slots_taken.add(slot if slot is not None else _free_slot(g))
                if consumed:
                    g.taken += 1
                else:
                    g.members.append((pos, e))
                    self._finished.append((g, pos, e))
            for gid in [gid for gid, g in self._open.items() if g.done]:
                del self._open[gid]
            self._cond.notify_all()
        return surplus

    # -- actors ---------------------------------------------------------------------------------
    def next_assignment(self, stop: threading.Event) -> Assignment | None:
        """Block until there is a slot to run (admission permitting); None once stopped."""
        with self._cond:
            while not (stop.is_set() or self._closed):
                for g in sorted(self._open.values(), key=lambda g: g.index):
                    if len(g.slots_taken) < g.size:
                        slot = _free_slot(g)
                        g.slots_taken.add(slot)
                        return Assignment(g.gid, g.index, g.task, slot)
                if self._may_open():
                    self._open_next()
                    continue
                self._cond.wait(0.1)
            return None

    def _may_open(self) -> bool:
        if self.max_open is not None and len(self._open) >= self.max_open:
            return False
        return self.max_staleness is None or self.version + self.max_staleness > self.sealed

    def _open_next(self) -> None:
        while True:
            index, task = self.cursor.take_one()
            if group_id(index, task.task_id) not in self._restored:
                break
        g = Group(index, task, self.group_size, self.version)
        self._open[g.gid] = g
        self.groups_opened += 1

    def finish(self, a: Assignment, episode: Episode, position: int) -> None:
        """A finished (already stored) episode of assignment `a`."""
        with self._cond:
            g = self._open[a.group_id]
            g.members.append((position, episode))
            self._finished.append((g, position, episode))
            self._cond.notify_all()

    # -- learner --------------------------------------------------------------------------------
    def set_version(self, version: int) -> None:
        with self._cond:
            self.version = version
            self._cond.notify_all()

    def seal(self) -> None:
        """The batch of the current version has what it needs (module doc)."""
        with self._cond:
            self.sealed = self.version

    def unseal(self) -> None:
        """A new batch starts forming at the current version (after one that trained nothing,
        the version did not move: its groups may open again)."""
        with self._cond:
            self.sealed = self.version - 1
            self._cond.notify_all()

    def due(self) -> set[str]:
        """Open groups whose deadline is the current version's batch (empty without admission
        control)."""
        if self.max_staleness is None:
            return set()
        with self._cond:
            return {
                g.gid for g in self._open.values() if g.version + self.max_staleness <= self.version
            }

    def take_group(self, timeout: float, only: set[str] | None = None) -> Group | None:
        """The complete group that completed first (restricted to `only`), removed from the
        board; None after `timeout` seconds."""

        def ready() -> Group | None:
            for g, _, _ in self._finished:
                if g.complete and (only is None or g.gid in only):
                    return g
            return None

        with self._cond:
            g = self._wait_ready(ready, timeout)
            if g is None:
                return None
            self._finished = [x for x in self._finished if x[0] is not g]
            g.taken = g.size
            del self._open[g.gid]
            self._cond.notify_all()  # admission: room for a new group
            return g

    def take_episode(
        self, timeout: float, only: set[str] | None = None
    ) -> tuple[Group, int, Episode] | None:
        """The finished episode that finished first (of a group in `only`), removed from the
        board; its group closes once every member is taken. None after `timeout` seconds."""

        def ready() -> int | None:
            for i, (g, _, _) in enumerate(self._finished):
                if only is None or g.gid in only:
                    return i
            return None

        with self._cond:
            i = self._wait_ready(ready, timeout)
            if i is None:
                return None
            g, pos, e = self._finished.pop(i)
            g.members.remove((pos, e))
            g.taken += 1
            if g.done:
                del self._open[g.gid]
                self._cond.notify_all()
            return g, pos, e

    def _wait_ready(self, ready: Callable[[], T | None], timeout: float) -> T | None:
        """With the lock held: ready()'s value once it is not None; None on timeout or close."""
        self._cond.wait_for(lambda: ready() is not None or self._closed, timeout)
        return ready()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """No group opens or finishes inside the block (consistent checkpoints)."""
        with self._cond:
            yield

    def open_groups(self) -> list[tuple[int, str, int]]:
        """(index, task id, version) of every group opened and not yet fully taken."""
        with self._cond:
            return sorted((g.index, g.task.task_id, g.version) for g in self._open.values())

    def counts(self) -> dict[str, float]:
        with self._cond:
            return {
                "open_groups": float(len(self._open)),
                "finished_waiting": float(len(self._finished)),
            }


def _free_slot(g: Group) -> int:
    return next(s for s in range(g.size + len(g.slots_taken) + 1) if s not in g.slots_taken)
