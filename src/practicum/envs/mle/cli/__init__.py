"""`practicum mle ...`: importing this package registers the `mle` command
(`practicum.envs.registry.register_command`).

Handlers raise `PracticumError` subclasses for bad input (unknown competition, broken folder,
missing file, bad option); the main CLI prints those on one line. Heavy imports happen inside
the handlers, so building the parser stays cheap for every other command.
"""

import argparse

from practicum.envs.mle.cli.commands import add_mle_commands
from practicum.envs.mle.cli.evaluate import add_evaluate_command
from practicum.envs.registry import CommandHost, register_command

__all__ = ["add_mle_commands"]


def add_arguments(parser: argparse.ArgumentParser, host: CommandHost) -> None:
    """list, prepare, grade, run and evaluate on the `mle` parser."""
    add_evaluate_command(add_mle_commands(parser), host)


register_command("mle", "ML-engineering competitions", add_arguments)
