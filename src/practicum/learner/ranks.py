"""How one learner step spans processes: the identity for one process, and how rows are split.

`practicum.learner.sharded.GroupRanks` overrides `Ranks` for a process group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def split_even(items: list, parts: int) -> list[list]:
    """`items` cut into `parts` contiguous chunks whose sizes differ by at most one."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (k < extra)
        out.append(items[start:end])
        start = end
    return out


class Ranks:
    """How a learner's step spans processes: here, one process (the identity). The sharded
    learner's ranks (`practicum.sharded.GroupRanks`) override each method."""

    rank, world = 0, 1
    in_group = False
    """Whether the ranks form a torch.distributed process group (the default one), through
    which collective file formats (`torch.distributed.checkpoint`) coordinate."""

    @property
    def data_rank(self) -> int:
        """Which share of each mini-batch's rows this rank trains on (the ranks of a sequence
        group share one: `practicum.learner.sequence.SequenceRanks`)."""
        return self.rank

    @property
    def data_world(self) -> int:
        """How many shares each mini-batch's rows are split into."""
        return self.world

    def sum(self, values: list[float]) -> list[float]:
        """Each value added up over the ranks (over the shares of the rows)."""
        return values

    def max(self, value: float) -> float:
        return value

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value` (a small picklable object), in rank order, on every rank."""
        return [value]

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Restore the optimizer from its whole state in one process's layout
        (`Optimizer.state_dict()`, as format-1 checkpoints hold it)."""
        optimizer.load_state_dict(state)

    def barrier(self) -> None:
        """Wait until every rank got here."""


def split_ranks(rows: list, world: int, cost: Callable[[Any], int] | None = None) -> list[list]:
    """`rows` cut into `world` contiguous parts (some empty when there are fewer rows). With
    `cost` (a row's tokens: the forward's work) the busiest part is as light as contiguous
    parts allow, and every rank gets a row while there are rows enough; without, the parts'
    counts differ by at most one."""
    if cost is None or len(rows) <= world:
        size, extra = divmod(len(rows), world)
        bounds = [k * size + min(k, extra) for k in range(world + 1)]
        return [rows[bounds[k] : bounds[k + 1]] for k in range(world)]
    costs = [cost(r) for r in rows]

    def fill(limit: int) -> list[list] | None:  # greedy, leaving a row for each later rank
        parts, i = [], 0
        for k in range(world):
            load, start = 0, i
            while (
                i < len(rows)
                and load + costs[i] <= limit
                and (i == start or len(rows) - i > world - k - 1)
            ):
                load += costs[i]
                i += 1
            parts.append(rows[start:i])
        return parts if i == len(rows) else None

    lo, hi = max(costs), sum(costs)  # the least busiest-part load that fits, by bisection
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fill(mid) is not None else (mid + 1, hi)
    return fill(lo)


def token_budget_batches(rows: list, budget: int, cost: Callable[[Any], int]) -> list[list]:
    """`rows` in order, cut into micro-batches of at most `budget` total `cost` each; a row
    costing more than `budget` forms a micro-batch alone (rows are never split)."""
    out: list[list] = []
    used = 0
    for r in rows:
        c = cost(r)
        if not out or used + c > budget:
            out.append([])
            used = 0
        out[-1].append(r)
        used += c
    return out
