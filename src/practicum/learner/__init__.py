"""The learner: one training step for every objective, over one process or a sharded group.

    step.py        `Learner`: the update (PPO variants, cross-entropy) on a batch of rows
    rows.py        what it trains on: `TrainBatch` of `TrainRow`s the driver built, padded
    ranks.py       how a step spans processes (`Ranks`, row splits)
    sharded.py     FSDP2 over a process group, full or hybrid mesh (`ShardedTrainable`,
                   `GroupRanks`)
    sequence.py    sequence parallelism: a row's positions over a group of ranks (Ulysses
                   attention, `SequenceParallelTrainable`, `SequenceRanks`)
    load.py        the sharded model built on the meta device, filled from rank 0's reads
    shards.py      whole tensors scattered from / gathered to rank 0, one at a time
    export.py      a policy folder (peft adapter or HF model) written one tensor at a time
    tensor_files.py  safetensors read and written one tensor at a time
    checkpoint.py  checkpoints with exact resume, and the `latest` pointer
    phases.py      each rank's phase on the rendezvous store: who stalled or died, doing what

The learner imports nothing from the runtime loop, the session or the environments.
"""

from practicum.learner.checkpoint import latest_checkpoint, read_trainer_state
from practicum.learner.step import Learner, lr_lambda

__all__ = ["Learner", "latest_checkpoint", "lr_lambda", "read_trainer_state"]
