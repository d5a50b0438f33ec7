"""Work folders that cannot outlive their owner: removed by `remove()` (env close), when the
owning object is garbage collected, or when the interpreter exits, whichever comes first.

    self._scratch = ScratchDir(self, "practicum-flow-")   # in reset
    self._scratch.remove()                                 # in close

An environment forgotten without `close()` (a test, an episode cut short by a shutdown that
never reached `close`) therefore leaves nothing in the temp folder. `shutil.rmtree` never
follows symlinks the sandboxed code planted, so only the folder's own entries go.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path


def remove_tree(path: str, attempts: int = 40) -> None:
    """`shutil.rmtree` until the folder is gone: a sandboxed process being stopped (a shutdown
    cancels every running episode at once) may still add an entry while the tree is walked,
    which leaves the folder behind; it is retried for up to about 2 s."""
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return
        time.sleep(0.05)


class ScratchDir:
    """A fresh private folder `<tmp>/<prefix>XXXX` tied to the lifetime of `owner`."""

    def __init__(self, owner: object, prefix: str, root: str | Path | None = None):
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        # The callback must not reference `owner`, or the owner would never be collected.
        self._finalizer = weakref.finalize(owner, remove_tree, str(self.path))

    def remove(self) -> None:
        """Delete the folder now (idempotent)."""
        self._finalizer()
