"""Bounded capture of a stream: keep the head and the tail, count what was dropped.

A sandboxed program may print gigabytes; the reader feeds chunks as they arrive and memory
stays at `limit` bytes whatever the stream's length.
"""

from __future__ import annotations


class BoundedOutput:
    """The first `limit // 2` and the last `limit - limit // 2` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"output limit must be > 0 bytes, got {limit}")
        self.head_size = limit // 2
        self.tail_size = limit - self.head_size
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        """Bytes seen so far."""

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_size - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data[-self.tail_size :]
            excess = len(self.tail) - self.tail_size
            if excess > 0:
                del self.tail[:excess]

    @property
    def dropped(self) -> int:
        """Bytes between the head and the tail that were not kept."""
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """The kept bytes as text (invalid UTF-8 replaced), with a marker where bytes were cut."""
        if self.dropped == 0:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n...[truncated {self.dropped} bytes]...\n{tail}"
