"""practicum: RL for language-model agents acting in real, slow, stateful environments."""

import os

# No model hub is reachable on our machines; without this a hub name fails only after ~25 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _forget_an_empty_compile_cache() -> None:
    """torch makes its compile cache folder (`torchinductor_<user>` in the temp folder) as
    soon as torch._dynamo is imported, which peft does: a run that compiled nothing would
    leave an empty folder behind. It is removed at exit if this process made it and it is still
    empty. (Moving the cache elsewhere is no fix: a folder shared by every torch on the machine
    mixes the kernels of vLLM's venv, whose torch differs, across checkouts.)"""
    import atexit
    import getpass
    import re
    import tempfile

    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    try:
        user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    except (KeyError, ModuleNotFoundError, OSError):
        return
    folder = os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    if os.path.exists(folder):
        return

    def forget() -> None:
        try:
            os.rmdir(folder)  # only an empty folder: whatever was compiled stays
        except OSError:
            pass

    atexit.register(forget)


_forget_an_empty_compile_cache()

__version__ = "0.1.0"
