"""The learner's ledger: which stored episodes each optimizer step consumed, and how.

The async learner takes complete groups in completion order, which is not store order, so
"consumed" is a watermark (every position below it is consumed) plus the consumed positions
above it. Both go into checkpoints; the log file `consumed.jsonl` holds one row per step

    {"step": 7, "trained": [[position, episode_id], ...], "filtered": [...], "dropped": [...]}

(trained: in the loss; filtered: zero-variance group; dropped: too stale). On resume the rows
after the checkpoint's step are cut, since their updates were lost with the crash. Auditing a
run is then a set check: every stored episode appears in at most one row, and every position
below the watermark in exactly one (`read_ledger`, `tests/runtime/test_async.py`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from practicum.episode import Episode

KINDS = ("trained", "filtered", "dropped")


class ConsumptionLedger:
    def __init__(self, path: Path, watermark: int = 0, beyond: Iterable[int] = (),
                 step: int = 0):
        """Resume at optimizer step `step` (0 = fresh start): rows of later steps are cut."""
        self.path = Path(path)
        self.watermark = watermark
        self.beyond = set(beyond)
        self._cut_after(step)

    def _cut_after(self, step: int) -> None:
        if not self.path.exists():
            return
        rows = [r for r in _rows(self.path) if r["step"] <= step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.path)

    def is_consumed(self, position: int) -> bool:
        return position < self.watermark or position in self.beyond

    def unconsumed(self, store_len: int) -> list[int]:
        return [p for p in range(self.watermark, store_len) if p not in self.beyond]

    def record(self, step: int, **kinds: list[tuple[int, Episode]]) -> None:
        """Mark positions consumed and append the step's row (kinds: trained/filtered/dropped)."""
        row: dict = {"step": step}
        for kind in KINDS:
            items = kinds.get(kind, [])
            row[kind] = [[p, e.episode_id] for p, e in items]
            for p, _ in items:
                if self.is_consumed(p):
                    raise RuntimeError(f"store position {p} consumed twice (step {step})")
                self.beyond.add(p)
        while self.watermark in self.beyond:
            self.beyond.remove(self.watermark)
            self.watermark += 1
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()

    def state(self) -> dict:
        return {"consumed_beyond": sorted(self.beyond)}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_ledger(path: Path) -> list[dict]:
    """The rows of a ledger file, in step order."""
    return sorted(_rows(path), key=lambda r: r["step"]) if Path(path).exists() else []
