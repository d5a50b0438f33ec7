"""What importing practicum sets up for the process: nothing of torch's left in /tmp."""

import os
import subprocess
import sys


def test_importing_the_training_stack_leaves_nothing_in_the_temp_folder(tmp_path):
    """torch makes its compile cache folder when torch._dynamo is imported (peft does), in the
    temp folder by default; practicum points it at the user's cache folder instead."""
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "HOME": str(home)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    subprocess.run([sys.executable, "-c", "import practicum, peft"], env=env, check=True)
    assert list(tmp.iterdir()) == []
    assert (home / ".cache" / "practicum" / "torchinductor").is_dir()
