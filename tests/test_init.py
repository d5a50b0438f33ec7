"""What importing practicum sets up for the process: nothing of torch's left in /tmp."""

import os
import subprocess
import sys


def test_importing_the_training_stack_leaves_nothing_in_the_temp_folder(tmp_path):
    """torch makes its compile cache folder when torch._dynamo is imported (peft does), in the
    temp folder; a process that compiled nothing removes it again at exit."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    code = "import practicum, peft, os, sys; print(os.listdir(sys.argv[1]))"
    seen = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True
    )
    assert b"torchinductor_" in seen.stdout  # made while the process ran
    assert list(tmp_path.iterdir()) == []  # and gone after it


def test_a_compile_cache_that_was_there_before_is_left_alone(tmp_path):
    import getpass

    mine = tmp_path / f"torchinductor_{getpass.getuser()}"
    mine.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    subprocess.run([sys.executable, "-c", "import practicum, peft"], env=env, check=True)
    assert mine.is_dir()
