"""The command line: user errors are one clear line and exit code 2; bugs keep tracebacks."""

import pytest

import practicum.cli as cli
from practicum.cli import main


def test_unknown_config_key_is_named(capsys):
    assert main(["train", "train.lrr=3"]) == 2
    assert "config error at train.lrr: unknown key" in capsys.readouterr().err


def test_unknown_model_fails_fast_with_a_message(capsys, tmp_path):
    code = main(["train", "model.model=no-such-model-xyz", f"run.out_dir={tmp_path}",
                 "task.name=toy"])
    assert code == 2
    assert "no-such-model-xyz" in capsys.readouterr().err


def test_missing_config_file(capsys):
    assert main(["train", "does-not-exist.yaml"]) == 2
    assert "not found" in capsys.readouterr().err


def test_an_internal_bug_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise ValueError("a bug, not the user's input")

    monkeypatch.setattr(cli, "cmd_plot", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["plot", "somewhere"])


def test_envs_lists_the_registered_environments_and_their_options(capsys):
    assert main(["envs", "--options"]) == 0
    out = capsys.readouterr().out
    for name in ("calculator", "mle", "timed_bandit", "toy"):
        assert f"\n{name} " in "\n" + out
    assert "numeric_answers = True" in out
