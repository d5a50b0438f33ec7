"""Append-only, crash-safe episode store: one JSON line per finished episode.

Episodes are flushed and fsync'ed before the learner sees them. A crash mid-write leaves at most
one partial last line, which is cut off when the store is reopened. Which positions have been
consumed is the ledger's business (`practicum.store.ledger`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterator

from practicum.episode import Episode


class EpisodeStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._repair()
        self._count = sum(1 for _ in self._lines())

    def _repair(self) -> None:
        """Cut a partial last line left by a crash mid-append."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as f:
                f.truncate(keep)

    def _lines(self) -> Iterator[str]:
        if not self.path.exists():
            return
        with open(self.path) as f:
            for line in f:
                if line.strip():
                    yield line

    def append(self, episodes: list[Episode]) -> int:
        """Persist episodes durably; returns the new total count."""
        if not episodes:
            return self._count
        payload = "".join(e.to_json() + "\n" for e in episodes)
        with self._lock:
            with open(self.path, "a") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            self._count += len(episodes)
            return self._count

    def __len__(self) -> int:
        return self._count

    def read(self, start: int = 0, stop: int | None = None) -> list[Episode]:
        """Episodes with index in [start, stop)."""
        out = []
        for i, line in enumerate(self._lines()):
            if stop is not None and i >= stop:
                break
            if i >= start:
                out.append(Episode.from_json(line))
        return out

    def __iter__(self) -> Iterator[Episode]:
        for line in self._lines():
            yield Episode.from_json(line)
