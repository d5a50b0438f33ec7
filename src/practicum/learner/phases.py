"""Which learner rank stalled or died, and doing what: every rank posts its phase where the
others can read it (the rendezvous store), so that a failed collective names the culprit.

    board = PhaseBoard.open(timeout_s)        # every rank, once the process group is joined
    watch_layers(board, layers)               # each decoder layer's forward and backward
    with board.call("train_step 3"): ...      # a collective call: a failure is diagnosed
    board.close()

Each rank keeps its current phase ("train_step 3: backward, layer 1") and how many phases it
went through; a daemon thread posts both, with a heartbeat count, to the store every
`interval` seconds (one key per rank), so the hot path only sets two attributes (a call's
start and end are posted at once: a dead rank's post names its call, and its phase as of its
last heartbeat). The ranks go
through the same phases in the same order (every call is a collective, every rank runs as many
passes), so their counts compare. When a collective fails on a rank (its timeout, a peer's
closed socket), that rank reads the board twice, a few intervals apart (`diagnose`): a rank
whose heartbeat did not move is dead (its last post says where it died), a rank that posted an
error of its own failed, and of the living, those whose count is behind the others' stalled (a rank
that already gave up waiting posts its verdict and is left out). `TrainingError` names them and
their phases; with no culprit (every rank
alive and in step, e.g. this rank's own bug) the original error stands.

The store is the process group's rendezvous (MASTER_ADDR:MASTER_PORT), through a client
connection of its own: torchrun's agent holds it, or rank 0's process (a Ray group), so when
that process is gone there is nothing to read, which is reported as such.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from practicum.errors import TrainingError

PREFIX = "practicum/phases"


@dataclass
class Post:
    """What one rank last posted."""

    rank: int
    beat: int
    count: int
    phase: str
    host: str
    pid: int
    error: str | None = None
    """An error of this rank's own (it failed)."""
    verdict: str | None = None
    """What this rank concluded when its collective failed (it gave up waiting for others):
    such a rank is no culprit, whatever it does next (exit, stop posting)."""


def heartbeat_interval(timeout_s: float) -> float:
    """Seconds between posts: a hundredth of the collective timeout, within 0.2 to 1 s."""
    return min(1.0, max(0.2, timeout_s / 100))


def _store(host: str, port: int, timeout_s: float) -> dist.Store:
    client = dist.TCPStore(host, port, None, False, timedelta(seconds=timeout_s))
    return dist.PrefixStore(PREFIX, client)


def read_board(store: dist.Store, world: int) -> dict[int, Post]:
    """Every rank's last post (a rank that never posted is left out)."""
    out = {}
    for rank in range(world):
        key = f"rank{rank}"
        if store.check([key]):
            out[rank] = Post(**json.loads(store.get(key)))
    return out


def last_phases(host: str, port: int, world: int) -> dict[int, Post]:
    """The board as a process outside the group reads it (the Ray group's driver); empty when
    the store is gone."""
    try:
        return read_board(_store(host, port, 5.0), world)
    except (RuntimeError, OSError):
        return {}


class PhaseBoard:
    """This rank's post on the board, and its reading of the others' (module doc)."""

    def __init__(self, store: dist.Store, rank: int, world: int, interval: float, where: str):
        self.store, self.rank, self.world, self.interval = store, rank, world, interval
        self.where = where
        """The store's address, for the report when it is gone."""
        self.label = "starting"
        self.phase, self.count, self.error, self.verdict = "starting", 0, None, None
        self._beat = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._post()
        self._thread = threading.Thread(target=self._run, name="phase-board", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, timeout_s: float) -> PhaseBoard:
        """This rank's board on the process group's rendezvous store (MASTER_ADDR, MASTER_PORT),
        posting every `heartbeat_interval(timeout_s)` seconds."""
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        return cls(
            _store(host, port, min(timeout_s, 60.0)),
            dist.get_rank(),
            dist.get_world_size(),
            heartbeat_interval(timeout_s),
            f"{host}:{port}",
        )

    # -- this rank ------------------------------------------------------------------------------
    def mark(self, detail: str | None = None) -> None:
        """This rank enters a phase: the current call's label, with `detail` after it."""
        self.phase = self.label if detail is None else f"{self.label}: {detail}"
        self.count += 1

    @contextmanager
    def call(self, label: str) -> Iterator[None]:
        """A collective call: its phases are labelled `label`; a RuntimeError inside (a
        collective's timeout or a peer's closed socket among them) is diagnosed: TrainingError
        naming the culprit, else the error is posted (this rank failed) and raised."""
        self.label = label
        self.mark()
        self._post()
        try:
            yield
        except Exception as err:
            found = self.diagnose() if isinstance(err, RuntimeError) else None
            if found is None:
                self.error = f"{type(err).__name__}: {_first_line(err)}"
                self._post()
                raise
            self.verdict = found
            self._post()
            raise TrainingError(
                f"{found}; rank {self.rank} waited in {self.phase} "
                f"({type(err).__name__}: {_first_line(err)})"
            ) from None
        self.label = f"idle after {label}"
        self.mark()
        self._post()

    def _post(self) -> None:
        self._beat += 1
        post = Post(
            self.rank,
            self._beat,
            self.count,
            self.phase,
            socket.gethostname(),
            os.getpid(),
            self.error,
            self.verdict,
        )
        with self._lock:
            self.store.set(f"rank{self.rank}", json.dumps(post.__dict__))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._post()
            except (RuntimeError, OSError):  # the store is gone: the group is ending
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    # -- the others -----------------------------------------------------------------------------
    def diagnose(self) -> str | None:
        """The ranks that died, failed or stalled, with their phases, read from two looks at
        the board a few heartbeats apart (at least 2 s: a busy machine may delay a living
        rank's); None when every rank is alive and in step."""
        window = max(2.0, 4 * self.interval)
        try:
            with self._lock:
                first = read_board(self.store, self.world)
            time.sleep(window)
            with self._lock:
                second = read_board(self.store, self.world)
        except (RuntimeError, OSError) as err:
            return (
                f"the rendezvous store at {self.where} is unreachable (the process that "
                f"holds it, rank 0's or torchrun's agent, is gone: {_first_line(err)})"
            )
        return culprits(first, second, self.rank, self.world, window)


def culprits(
    first: dict[int, Post], second: dict[int, Post], me: int, world: int, window: float
) -> str | None:
    """What two looks at the board `window` seconds apart say (module doc), from rank `me`'s
    side; None when no other rank is dead, failed or behind. A rank that already gave up
    waiting (its post has a verdict) is left out: it is a survivor like `me`."""
    found, alive, gave_up = [], {}, {}
    for rank in range(world):
        if rank == me:
            continue
        post = second.get(rank)
        if post is not None and post.verdict:
            gave_up[rank] = post.verdict
            continue
        if post is None:
            found.append(f"learner rank {rank} never posted (it did not start)")
        elif rank in first and first[rank].beat == post.beat:
            error = f"; its error: {post.error}" if post.error else ""
            found.append(
                f"learner rank {rank} died in {post.phase} (pid {post.pid} on "
                f"{post.host}; no heartbeat for {window:.1f} s{error})"
            )
        elif post.error:
            found.append(f"learner rank {rank} failed in {post.phase}: {post.error}")
        else:
            alive[rank] = post
    if found:
        return "; ".join(found)
    if me in second:
        alive[me] = second[me]
    ahead = max((p.count for p in alive.values()), default=0)
    stalled = [
        f"learner rank {r} stalled in {p.phase} (pid {p.pid} on {p.host}: alive, "
        f"{ahead - p.count} phase(s) behind the others)"
        for r, p in sorted(alive.items())
        if p.count < ahead and r != me
    ]
    if stalled or not gave_up:
        return "; ".join(stalled) or None
    first = min(gave_up)  # every other rank gave up waiting: most likely for this one
    return (
        f"learner rank(s) {sorted(gave_up)} gave up waiting for the others (rank {first}: "
        f"{gave_up[first]})"
    )


def watch_layers(board: PhaseBoard, layers: list[nn.Module], what: str = "") -> None:
    """Mark each of `layers` (FSDP2 units, in order) on `board` around each stretch of work
    between its collectives: as its forward starts (before FSDP gathers its weights) and ends,
    as its backward starts (before the gather for it: a hook on its output's gradient, placed
    before FSDP's) and ends (a hook on the gradient of its input as FSDP passed it on, which
    fires before FSDP's reduce-scatter). A rank stopped anywhere in a layer's work then has
    fewer marks than the ranks waiting for it in the next collective. `what` prefixes the
    phase (e.g. "reference ")."""

    def hook_grad(t, label: str) -> None:
        if torch.is_tensor(t) and t.requires_grad:
            t.register_hook(lambda grad: board.mark(label))

    for i, layer in enumerate(layers):
        name = f"{what}layer {i}"

        def forward_starts(module, args, name=name):
            board.mark(f"forward, {name}")

        def gathered(module, args, name=name):  # after FSDP's hook: args are what it passes on
            hook_grad(args[0] if args else None, f"backward, {name} done")

        def forward_ends(module, args, out, name=name):
            board.mark(f"forward, {name} done")
            hook_grad(out[0] if isinstance(out, tuple) else out, f"backward, {name}")

        layer.register_forward_pre_hook(forward_starts, prepend=True)
        layer.register_forward_pre_hook(gathered)
        layer.register_forward_hook(forward_ends, prepend=True)


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""
