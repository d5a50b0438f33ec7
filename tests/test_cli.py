"""The command line turns bad input into one clear line and exit code 2."""

from practicum.cli import main


def test_unknown_config_key_is_named(capsys):
    assert main(["train", "train.lrr=3"]) == 2
    assert "config error at train.lrr: unknown key" in capsys.readouterr().err


def test_unknown_model_fails_fast_with_a_message(capsys, tmp_path):
    code = main(["train", "model.model=no-such-model-xyz", f"run.out_dir={tmp_path}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "no-such-model-xyz" in err


def test_missing_config_file(capsys):
    assert main(["train", "does-not-exist.yaml"]) == 2
    assert "not found" in capsys.readouterr().err
