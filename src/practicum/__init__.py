"""practicum: RL for language-model agents acting in real, slow, stateful environments."""

import os

# No model hub is reachable on our machines; without this a hub name fails only after ~25 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# torch makes its compile cache folder as soon as torch._dynamo is imported (peft imports it),
# by default in /tmp, where it would outlive every run and test: a user cache folder instead.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(os.path.expanduser("~"), ".cache", "practicum", "torchinductor"),
)

__version__ = "0.1.0"
