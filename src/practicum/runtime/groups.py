"""Episode slots for actors, finished episodes into complete GRPO groups, admission control.

A group is one task sampled `group_size` times. Actors ask `next_assignment` for a slot: first
unassigned slots of already open groups (oldest first), else a new group from the task cursor.
Finished episodes come back through `finish`; a group whose members are all in is *complete*
and queued for the learner in completion order (`take`). Because the learner only sees complete
groups, fast episodes cannot crowd slow ones out of a group's baseline.

Admission control (runtime.staleness_policy = admission, as AReaL's max_head_offpolicyness,
arXiv 2505.24298): a new group opens only while fewer than (max_staleness + 1) * tasks_per_step
groups are open (opened, not yet taken by the learner), so sampling runs at most max_staleness
batches ahead of the learner.

Group ids are `g{index}/{task_id}` with `index` the cursor position that opened the group, so a
resumed run re-opens the same groups and finds their members already in the store.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from practicum.envs.base import Task
from practicum.episode import Episode
from practicum.suites import TaskCursor


def group_id(index: int, task_id: str) -> str:
    return f"g{index}/{task_id}"


def group_index_of(gid: str) -> int:
    head = gid.split("/", 1)[0]
    if not head.startswith("g") or not head[1:].isdigit():
        raise ValueError(f"episode group id {gid!r} is not an async group id (g<index>/<task>)")
    return int(head[1:])


@dataclass
class Assignment:
    """One episode to run: the `slot`-th member of group `group_id`."""

    group_id: str
    index: int
    task: Task
    slot: int


@dataclass
class Group:
    index: int
    task: Task
    size: int
    assigned: int = 0
    members: list[tuple[int, Episode]] = field(default_factory=list)
    """(store position, episode) of each finished member, in completion order."""
    opened_at: float = field(default_factory=time.perf_counter)

    @property
    def gid(self) -> str:
        return group_id(self.index, self.task.task_id)

    @property
    def episodes(self) -> list[Episode]:
        return [e for _, e in self.members]

    @property
    def positions(self) -> list[int]:
        return [p for p, _ in self.members]


class GroupBoard:
    def __init__(self, cursor: TaskCursor, group_size: int, max_open: int | None = None):
        self.cursor, self.group_size, self.max_open = cursor, group_size, max_open
        self._cond = threading.Condition()
        self._open: dict[str, Group] = {}
        self._ready: list[Group] = []
        self._restored: set[str] = set()
        self._closed = False
        self.groups_opened = 0

    # -- resume -------------------------------------------------------------------------------
    def restore(self, open_groups: list[tuple[int, str]], pending: list[tuple[int, Episode]],
                tasks_by_id: dict[str, Task]) -> list[int]:
        """Re-open the groups a checkpoint left open and those of stored, unconsumed episodes;
        their stored members count as finished. Returns surplus positions (more members than a
        group holds) for the caller to mark consumed."""
        wanted = {group_id(i, t): (i, t) for i, t in open_groups}
        for _, e in pending:
            wanted.setdefault(e.group_id, (group_index_of(e.group_id), e.task_id))
        surplus = []
        with self._cond:
            for gid, (index, task_id) in sorted(wanted.items(), key=lambda kv: kv[1][0]):
                if task_id not in tasks_by_id:
                    raise ValueError(f"cannot resume group {gid}: task {task_id!r} is not in the "
                                     f"training tasks any more")
                g = Group(index, tasks_by_id[task_id], self.group_size)
                self._open[gid] = g
                self._restored.add(gid)
            for pos, e in pending:
                g = self._open[e.group_id]
                if len(g.members) >= g.size:
                    surplus.append(pos)
                    continue
                g.members.append((pos, e))
                g.assigned += 1
            for g in sorted(self._open.values(), key=lambda g: g.index):
                if len(g.members) == g.size:
                    self._ready.append(g)
            self._cond.notify_all()
        return surplus

    # -- actors -------------------------------------------------------------------------------
    def next_assignment(self, stop: threading.Event) -> Assignment | None:
        """Block until there is a slot to run (admission permitting); None once stopped."""
        with self._cond:
            while not (stop.is_set() or self._closed):
                for g in sorted(self._open.values(), key=lambda g: g.index):
                    if g.assigned < g.size:
                        g.assigned += 1
                        return Assignment(g.gid, g.index, g.task, g.assigned - 1)
                if self.max_open is None or len(self._open) < self.max_open:
                    self._open_next()
                    continue
                self._cond.wait(0.1)
            return None

    def _open_next(self) -> None:
        while True:
            index = self.cursor.position
            task = self.cursor.take(1)[0]
            if group_id(index, task.task_id) not in self._restored:
                break
        g = Group(index, task, self.group_size)
        self._open[g.gid] = g
        self.groups_opened += 1

    def finish(self, a: Assignment, episode: Episode, position: int) -> None:
        """A finished (already stored) episode of assignment `a`."""
        with self._cond:
            g = self._open[a.group_id]
            g.members.append((position, episode))
            if len(g.members) == g.size:
                self._ready.append(g)
                self._cond.notify_all()

    # -- learner ------------------------------------------------------------------------------
    def take(self, timeout: float) -> Group | None:
        """The oldest complete group (removed from the board), or None after `timeout` s."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or self._closed, timeout):
                return None
            if not self._ready:
                return None
            g = self._ready.pop(0)
            del self._open[g.gid]
            self._cond.notify_all()  # admission: a slot for a new group
            return g

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """No group opens or completes inside the block (consistent checkpoints)."""
        with self._cond:
            yield

    def open_groups(self) -> list[tuple[int, str]]:
        """(index, task id) of every group opened and not yet taken: saved in checkpoints."""
        with self._cond:
            return sorted((g.index, g.task.task_id) for g in self._open.values())

    def counts(self) -> dict[str, float]:
        with self._cond:
            return {"open_groups": float(len(self._open)), "ready_groups": float(len(self._ready))}
