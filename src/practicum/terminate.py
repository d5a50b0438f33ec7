"""SIGTERM unwinds like Ctrl-C: `kill`, a scheduler or torchrun stopping its ranks then runs
every `finally` and `with` on the way out, so environments close and remove their work folders
(the default action ends the process with its temp folders still on disk)."""

from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; a KeyboardInterrupt so that no `except Exception` on the way mistakes it
    for an episode's failure."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def unwind_on_sigterm() -> None:
    """Make SIGTERM raise `Terminated` in the main thread; leaves a handler someone else
    installed (e.g. `practicum serve`'s) in place. Only the main thread can install one."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, _raise_terminated)
