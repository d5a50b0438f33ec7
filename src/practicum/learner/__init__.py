"""The learner: one training step for every objective, over one process or a sharded group.

    step.py        `Learner`: the update (PPO variants, cross-entropy) on a batch of rows
    ranks.py       how a step spans processes (`Ranks`, row splits)
    sharded.py     FSDP2 over a process group (`ShardedTrainable`, `GroupRanks`)
    checkpoint.py  checkpoints with exact resume, and the `latest` pointer

The learner imports nothing from the runtime loop, the session or the environments.
"""

from practicum.learner.checkpoint import latest_checkpoint, read_trainer_state
from practicum.learner.step import Learner, lr_lambda

__all__ = ["Learner", "latest_checkpoint", "lr_lambda", "read_trainer_state"]
