"""practicum: RL for language-model agents acting in real, slow, stateful environments."""

import os

# No model hub is reachable on our machines; without this a hub name fails only after ~25 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
