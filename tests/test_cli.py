"""The command line: user errors are one clear line and exit code 2; bugs keep tracebacks."""

import os
import sys

import pytest

import practicum.cli as cli
from practicum.cli import main


def test_unknown_config_key_is_named(capsys):
    assert main(["train", "train.lrr=3"]) == 2
    assert "config error at train.lrr: unknown key" in capsys.readouterr().err


def test_unknown_model_fails_fast_with_a_message(capsys, tmp_path):
    code = main(
        ["train", "model.model=no-such-model-xyz", f"run.out_dir={tmp_path}", "task.name=toy"]
    )
    assert code == 2
    assert "no-such-model-xyz" in capsys.readouterr().err


def test_missing_config_file(capsys):
    assert main(["train", "does-not-exist.yaml"]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "c.yaml", "a=1", "-q", "b=2", "c=3"],
        ["rft", "c.yaml", "a=1", "--quiet", "b=2", "c=3"],
        ["sft", "c.yaml", "a=1", "-q", "b=2", "c=3"],
        ["eval", "c.yaml", "a=1", "--label", "x", "b=2", "c=3"],
        ["audit", "toy", "a=1", "--tasks", "2", "b=2", "--attack", "empty", "c=3"],
        ["mle", "evaluate", "c.yaml", "a=1", "--label", "x", "b=2", "c=3"],
    ],
)
def test_overrides_may_come_before_or_after_the_flags(argv):
    """Every command's usage puts `[key=value ...]` anywhere; argparse alone stops at the
    first flag. The overrides keep their order (a later one wins)."""
    assert cli.parse_args(argv).overrides == ["a=1", "b=2", "c=3"]


def test_a_stray_argument_is_still_refused(capsys):
    for argv in (
        ["train", "c.yaml", "-q", "d.yaml"],
        ["plot", "run", "a=1"],
        ["audit", "toy", "--tasks", "1", "--bogus=1"],
    ):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(argv)
        assert e.value.code == 2
    assert capsys.readouterr().err.count("unrecognized arguments") == 3


def test_an_override_after_the_flags_reaches_the_config(capsys):
    assert main(["audit", "toy", "--tasks", "1", "task.options.no_such_option=1"]) == 2
    assert "task.options.no_such_option" in capsys.readouterr().err


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


def test_envs_options_name_required_fields_and_factory_defaults(capsys):
    assert main(["envs", "--options"]) == 0
    out = capsys.readouterr().out
    assert "PydanticUndefined" not in out
    assert "exclude = []" in out  # a default_factory field shows its value


def test_plot_of_a_missing_folder_is_one_line(capsys, tmp_path):
    assert main(["plot", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere does not exist" in err
    assert not (tmp_path / "nowhere").exists()


def test_plot_of_a_folder_that_is_no_run(capsys, tmp_path):
    assert main(["plot", str(tmp_path)]) == 2
    assert "is not a run folder (no metrics.jsonl)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_terminated_run_removes_its_work_folders_and_says_how_to_resume(tiny_model_dir, tmp_path):
    """SIGTERM (what schedulers and `kill` send) unwinds the run like Ctrl-C: the calculator's
    sandbox folders are removed, exit status 143, one line on how to resume."""
    import signal
    import subprocess
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "practicum.cli",
            "train",
            f"model.model={tiny_model_dir}",
            "model.dtype=float32",
            "task.name=calculator",
            "rollout.group_size=2",
            "rollout.tasks_per_step=2",
            "rollout.max_turns=2",
            "sampling.max_new_tokens=8",
            "train.steps=200",
            "eval.every=0",
            "algo.dynamic_sampling=false",
            "algo.mask_overlong=false",
            f"run.out_dir={tmp_path}",
            "run.name=t",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "t" / "progress.log"
    deadline = time.time() + 300
    while not (log.exists() and "step 1/200" in log.read_text()):
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.time() < deadline
        time.sleep(0.1)
    assert any(p.name.startswith("practicum-calc-") for p in tmp.iterdir())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert (
        err.strip().splitlines()[-1]
        == "practicum: terminated; run again with the same command to resume"
    )
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("practicum")]
