"""Work folders (envs/scratch.py) go even when a process still writes into them while they are
removed, as a sandbox being stopped by a shutdown may."""

import subprocess
import sys
import time

from practicum.envs.scratch import ScratchDir, remove_tree

WRITER = """
import os, sys, time
folder, until = sys.argv[1], time.monotonic() + 0.5
open(os.path.join(folder, "started"), "w").close()
i = 0
while time.monotonic() < until:
    try:
        open(os.path.join(folder, "f%d" % i), "w").close()
    except OSError:  # the folder is gone (for now)
        pass
    i += 1
"""


def test_a_folder_written_into_while_it_is_removed_is_still_removed(tmp_path):
    """Another process keeps adding files for 0.5 s (one plain `shutil.rmtree` leaves the folder
    behind then); `remove_tree` retries until it is gone."""
    path = tmp_path / "work"
    path.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
    while not (path / "started").exists():
        time.sleep(0.01)
    remove_tree(str(path))
    writer.wait(timeout=30)
    assert not path.exists()


def test_a_scratch_folder_goes_with_its_owner_or_on_remove(tmp_path):
    class Owner:
        pass

    owner = Owner()
    first = ScratchDir(owner, "practicum-test-", root=tmp_path)
    assert first.path.is_dir() and first.path.name.startswith("practicum-test-")
    first.remove()
    assert not first.path.exists()
    second = ScratchDir(owner, "practicum-test-", root=tmp_path)
    del owner  # collected: its folders go
    assert not second.path.exists()
