"""A run you can watch without a terminal: plain lines per step and per evaluation."""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from practicum.runtime.progress import TrainProgress, duration, eval_line, step_line

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_duration_reads_as_minutes_and_hours():
    assert [duration(s) for s in (4.6, 65, 3725)] == ["5s", "1m05s", "1h02m"]


def test_step_line_has_reward_solved_episodes_seconds_and_eta():
    line = step_line(3, 10, {"reward_mean": -4.21, "solved_rate": 0.1875, "loss": 0.01,
                             "step_seconds": 41.24}, episodes=64, elapsed=185, eta=288)
    assert line == ("step 3/10  reward -4.210  solved 0.188  loss +0.0100  episodes 64  "
                    "step 41.2 s  elapsed 3m05s  ETA 4m48s")


def test_eval_line_shows_the_valid_rate_when_the_environment_reports_one():
    result = {"reward_mean": -8.9, "solved_rate": 0.08, "tasks": 24, "env/valid": 0.125}
    assert eval_line(0, result, 95.3, "before training") == (
        "eval step 0 (before training)  reward -8.900  solved 0.080  valid 0.125  "
        "24 episodes  95.3 s")
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
        tiny_model_dir, toy_overrides, tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "practicum.cli", "train",
            *toy_overrides(tiny_model_dir, tmp_path, 2)]
    with open(tmp_path / "stdout.log", "w") as out:  # stdout a file: no terminal
        done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "stdout.log").read_text().splitlines()
    progress = [line for line in lines if line.startswith(("step ", "eval "))]
    assert [line.split("  ")[0] for line in progress] == [
        "eval step 0 (before training)", "step 1/2", "step 2/2", "eval step 2 (after training)"]
    assert re.fullmatch(r"step 1/2  reward -?\d+\.\d{3}  solved \d\.\d{3}  loss [+-]\d\.\d{4}  "
                        r"episodes 32  step \d+\.\d s  elapsed \S+  ETA \S+", progress[1])
    assert "FutureWarning" not in done.stderr and "past_key_values" not in done.stderr
    assert "Loading weights" not in done.stderr  # no progress bars written into a log file
    logged = (tmp_path / "toy" / "progress.log").read_text().splitlines()
    assert [line.split("  ", 1)[1] for line in logged] == progress


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
