"""The rich console the command line prints tables with."""

from __future__ import annotations

import sys

from rich.console import Console

PIPED_WIDTH = 1000
"""Columns a table may use when stdout is not a terminal: rich's default there (80) would cut
ids to fit with an ellipsis, and a piped table is read by programs and copied from."""


def table_console() -> Console:
    """The terminal's width on a TTY; wide enough for any row when stdout is piped or a file."""
    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)
