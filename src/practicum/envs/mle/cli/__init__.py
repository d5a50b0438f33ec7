"""`practicum mle ...`: the main CLI calls `add_mle_commands` on its `mle` parser.

Handlers raise `PracticumError` subclasses for bad input (unknown competition, broken folder,
missing file, bad option); the main CLI prints those on one line. Heavy imports happen inside
the handlers, so building the parser stays cheap for every other command.
"""

from practicum.envs.mle.cli.commands import add_mle_commands

__all__ = ["add_mle_commands"]
