"""The `mle` commands wired into an argparse tree as the main CLI does."""

import argparse

import pytest

from practicum.envs.mle.cli import add_mle_commands


def _cli(argv: list[str]) -> int:
    """Parse and dispatch like the main CLI; a PracticumError propagates (the main CLI prints
    it as one line)."""
    parser = argparse.ArgumentParser(prog="practicum")
    top = parser.add_subparsers(dest="command")
    mle = top.add_parser("mle")
    sub = mle.add_subparsers(dest="mle_command")
    assert add_mle_commands(sub) is sub  # the hook for `mle run`
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def cli():
    """argv -> exit code of `practicum ...` (mle commands only)."""
    return _cli


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
