"""A run you can watch without a terminal: plain lines per step and per evaluation."""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from practicum.runtime.progress import TrainProgress, counting, duration, eval_line, step_line

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_duration_reads_as_minutes_and_hours():
    assert [duration(s) for s in (4.6, 65, 3725)] == ["5s", "1m05s", "1h02m"]


def test_step_line_has_reward_solved_episodes_seconds_and_eta():
    line = step_line(
        3,
        10,
        {"reward_mean": -4.21, "solved_rate": 0.1875, "loss": 0.01, "step_seconds": 41.24},
        episodes=64,
        elapsed=185,
        eta=288,
    )
    assert line == (
        "step 3/10  reward -4.210  solved 0.188  loss +0.0100  episodes 64  "
        "step 41.2 s  elapsed 3m05s  ETA 4m48s"
    )


def test_eval_line_shows_the_headline_metrics_the_environment_reports():
    result = {
        "reward_mean": -8.9,
        "solved_rate": 0.08,
        "tasks": 24,
        "env/headline/valid": 0.125,
        "env/milestones": 2.5,
    }
    assert eval_line(0, result, 95.3, "before training") == (
        "eval step 0 (before training)  reward -8.900  solved 0.080  valid 0.125  "
        "24 episodes  95.3 s"
    )
    assert "valid" not in eval_line(2, {"reward_mean": 1.0, "solved_rate": 1.0}, 1.0)


def test_a_stream_that_is_no_terminal_gets_lines_and_the_log_file_the_same(tmp_path):
    stream = io.StringIO()  # isatty() is False, as for a file or a pipe
    bar = TrainProgress(2, enabled=True, log_dir=tmp_path, stream=stream)
    with bar:
        bar.update(1, {"reward_mean": 0.5, "step_seconds": 10.0}, episodes=16)
        bar.update(2, {"reward_mean": 0.75, "step_seconds": 20.0}, episodes=32)
    printed = stream.getvalue().splitlines()
    assert [line.split("  ")[0] for line in printed] == ["step 1/2", "step 2/2"]
    assert printed[0].endswith("ETA 10s") and printed[1].endswith("ETA 0s")
    logged = (tmp_path / "progress.log").read_text().splitlines()
    assert [line.split("  ", 1)[1] for line in logged] == printed  # after the timestamp


def test_quiet_prints_nothing_but_still_logs(tmp_path):
    stream = io.StringIO()
    bar = TrainProgress(1, enabled=False, log_dir=tmp_path, stream=stream)
    bar.evaluation(0, {"reward_mean": 0.0, "solved_rate": 0.0, "tasks": 8}, 1.0, "before")
    assert stream.getvalue() == ""
    assert "eval step 0 (before)" in (tmp_path / "progress.log").read_text()


def test_a_training_run_piped_to_a_file_prints_a_line_per_step_and_evaluation(
    tiny_model_dir, toy_overrides, tmp_path
):
    env = {
        **os.environ,
        "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "practicum.cli",
        "train",
        *toy_overrides(tiny_model_dir, tmp_path, 2),
    ]
    with open(tmp_path / "stdout.log", "w") as out:  # stdout a file: no terminal
        done = subprocess.run(
            argv, stdout=out, stderr=subprocess.PIPE, text=True, env=env, timeout=300
        )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "stdout.log").read_text().splitlines()
    progress = [line for line in lines if line.startswith(("step ", "eval "))]
    assert [line.split("  ")[0] for line in progress] == [
        "eval step 0 (before training)",
        "step 1/2",
        "step 2/2",
        "eval step 2 (after training)",
    ]
    assert re.fullmatch(
        r"step 1/2  reward -?\d+\.\d{3}  solved \d\.\d{3}  loss [+-]\d\.\d{4}  "
        r"episodes 32  step \d+\.\d s  elapsed \S+  ETA \S+",
        progress[1],
    )
    assert "FutureWarning" not in done.stderr and "past_key_values" not in done.stderr
    assert "Loading weights" not in done.stderr  # no progress bars written into a log file
    logged = (tmp_path / "toy" / "progress.log").read_text().splitlines()
    assert [
        line.split("  ", 1)[1]
        for line in logged
        if line.split("  ", 1)[1].startswith(("step ", "eval "))
    ] == progress
    counted = [line.split("  ")[0] for line in lines if line.startswith("evaluating ")]
    assert counted[0] == "evaluating step 0 (before training) 0/8"
    assert "evaluating step 2 (after training) 8/8" in counted


def test_other_progress_labels_name_their_lines_and_skip_missing_fields():
    stream = io.StringIO()
    bar = TrainProgress(64, enabled=True, label="rft sample", stream=stream)
    bar.update(16, {"reward_mean": 0.25})
    line = stream.getvalue().strip()
    assert line.startswith("rft sample 16/64  reward 0.250  elapsed ")
    assert "solved" not in line and "nan" not in line


def test_the_eta_counts_units_when_one_update_completes_several():
    stream = io.StringIO()
    bar = TrainProgress(64, enabled=True, label="rft sample", stream=stream)
    bar.update(16, {"step_seconds": 32.0})  # 16 episodes in 32 s: 2 s each, 48 to go
    assert stream.getvalue().strip().endswith("ETA 1m36s"), stream.getvalue()


class Clock:
    """time.monotonic for progress.py, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_counted_stage_prints_at_its_start_every_few_seconds_and_at_its_end(
    tmp_path, monkeypatch
):
    """A long stage is never silent: its first line at once, then at most one line per
    `every` seconds whatever the units' pace, and its last line; the log gets each line with
    its timestamp."""
    from practicum.runtime import progress

    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    stream = io.StringIO()
    with counting(
        "sft demonstrations", 6, enabled=True, log_dir=tmp_path, stream=stream, every=10.0
    ) as count:
        for seconds in (1, 1, 12, 1, 1, 1):  # units finished after these many seconds
            clock.now += seconds
            count.advance(info=f"solved {count.done + 1}")
    printed = stream.getvalue().splitlines()
    assert printed == [
        "sft demonstrations 0/6  elapsed 0s  ETA ?",
        "sft demonstrations 3/6  solved 3  elapsed 14s  ETA 14s",
        "sft demonstrations 6/6  solved 6  elapsed 17s  ETA 0s",
    ]
    logged = (tmp_path / "progress.log").read_text().splitlines()
    assert [line.split("  ", 1)[1] for line in logged] == printed
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  ", line) for line in logged)


def test_a_resumed_stage_counts_what_is_left():
    stream = io.StringIO()
    with counting("rft sample", 64, done=48, enabled=True, stream=stream) as count:
        count.advance(16)
    assert [line.split("  ")[0] for line in stream.getvalue().splitlines()] == [
        "rft sample 48/64",
        "rft sample 64/64",
    ]
    quiet = io.StringIO()
    with counting("rft sample", 2, enabled=False, stream=quiet) as count:
        count.advance(2)
    assert quiet.getvalue() == ""


def test_practicum_eval_counts_its_episodes(tiny_model_dir, toy_overrides, tmp_path, capsys):
    from practicum.cli import main

    assert main(["eval", *toy_overrides(tiny_model_dir, tmp_path, 0), "--label", "x"]) == 0
    counted = [
        line.split("  ")[0]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("evaluating ")
    ]
    assert counted[0] == "evaluating 0/8" and counted[-1] == "evaluating 8/8"
    assert "evaluating 8/8" in (tmp_path / "toy" / "progress.log").read_text()
