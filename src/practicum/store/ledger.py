"""The learner's ledger: which stored episodes each batch consumed, and how.

Batches take episodes in completion order, which is not store order, so "consumed" is a
watermark (every position below it is consumed) plus the consumed positions above it. Both go
into checkpoints; the log file `consumed.jsonl` holds one row per batch

    {"batch": 9, "step": 7, "trained": [[position, episode_id], ...], "filtered": [...],
     "dropped": [...]}

(trained: in the loss of optimizer step `step`; filtered: a zero-variance group, or a whole
batch that had nothing to train on; dropped: too stale). Batches are numbered separately from
steps because a batch with nothing to train on consumes episodes without an optimizer step. On
resume the rows after the checkpoint's batch are cut, since their effects were lost with the
crash. Auditing a run is then a set check: every stored episode appears in at most one row, and
every position below the watermark in exactly one (`read_ledger`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from practicum.episode import Episode

KINDS = ("trained", "filtered", "dropped")


class ConsumptionLedger:
    def __init__(
        self, path: Path, watermark: int = 0, beyond: Iterable[int] = (), batches: int = 0
    ):
        """Resume after `batches` recorded batches (0 = fresh start): later rows are cut."""
        self.path = Path(path)
        self.watermark = watermark
        self.beyond = set(beyond)
        self.batches = batches
        self._cut_after(batches)

    def _cut_after(self, batches: int) -> None:
        if not self.path.exists():
            return
        rows = [r for r in _rows(self.path) if r["batch"] <= batches]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.path)

    def is_consumed(self, position: int) -> bool:
        return position < self.watermark or position in self.beyond

    def unconsumed(self, store_len: int) -> list[int]:
        return [p for p in range(self.watermark, store_len) if p not in self.beyond]

    def record(self, step: int, **kinds: list[tuple[int, Episode]]) -> int:
        """Mark positions consumed by the next batch and append its row; returns the batch
        number. kinds: trained / filtered / dropped, each a list of (position, episode)."""
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown ledger kinds {sorted(unknown)}")
        self.batches += 1
        row: dict = {"batch": self.batches, "step": step}
        for kind in KINDS:
            items = kinds.get(kind, [])
            row[kind] = [[p, e.episode_id] for p, e in items]
            for p, _ in items:
                if self.is_consumed(p):
                    raise RuntimeError(f"store position {p} consumed twice (batch {self.batches})")
                self.beyond.add(p)
        while self.watermark in self.beyond:
            self.beyond.remove(self.watermark)
            self.watermark += 1
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        return self.batches

    def state(self) -> dict:
        return {
            "watermark": self.watermark,
            "consumed_beyond": sorted(self.beyond),
            "batches": self.batches,
        }

    @classmethod
    def resume(cls, path: Path, state: dict | None) -> ConsumptionLedger:
        """The ledger as a checkpoint's `state()` left it (a fresh one for None)."""
        state = state or {}
        return cls(
            path,
            state.get("watermark", 0),
            state.get("consumed_beyond", ()),
            state.get("batches", 0),
        )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_ledger(path: Path) -> list[dict]:
    """The rows of a ledger file, in batch order."""
    return sorted(_rows(path), key=lambda r: r["batch"]) if Path(path).exists() else []
