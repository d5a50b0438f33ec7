"""`practicum mle run ID SOLUTION.py`: sandboxed, instrumented, graded, reported."""

from __future__ import annotations

import json

import pytest

from practicum.cli import main


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("mle-run-data")


def write(tmp_path, code: str):
    path = tmp_path / "solution.py"
    path.write_text(code)
    return str(path)


COPY_SAMPLE = "import shutil\nshutil.copyfile('sample_submission.csv', 'submission.csv')\n"


def test_valid_solution_prints_score_and_breakdown_as_json(tmp_path, data, capsys):
    code = main(["mle", "run", "iris-species", write(tmp_path, COPY_SAMPLE), "--data", str(data),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["valid"] and out["instrumenter"] == "rules"
    # the sample guesses one species everywhere: 15 of 45 test rows are right
    assert out["score"] == pytest.approx(1 / 3)
    assert out["milestones"] == ["libraries_imported"]  # shutil.copyfile is no known milestone
    assert out["reward"] == pytest.approx(1 / 3 + 0.1)
    assert out["reward_breakdown"]["score_credit"] == pytest.approx(1 / 3)


def test_failing_solution_exits_1_and_shows_the_failure(tmp_path, data, capsys):
    code = main(["mle", "run", "iris-species", write(tmp_path, "import os\nprint('hi')\n"),
                 "--data", str(data)])
    out = capsys.readouterr().out
    assert code == 1
    assert "no submission.csv was written" in out and "-9.9" in out and "1/7" in out


def test_no_partial_credit_flag(tmp_path, data, capsys):
    main(["mle", "run", "iris-species", write(tmp_path, "import os\n"), "--data", str(data),
          "--json", "--no-partial-credit"])
    assert json.loads(capsys.readouterr().out)["reward"] == -10.0


def test_template_mode_runs_a_region(tmp_path, data, capsys):
    code = main(["mle", "run", "diabetes-progression", write(tmp_path, "model = Ridge()\n"),
                 "--mode", "template", "--data", str(data), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["milestones"]) == 7 and 40 < out["score"] < 80
    # RMSE is lower-is-better: the default env transform 1 / (1 + v / 3)
    assert out["reward"] == pytest.approx(1 / (1 + out["score"] / 3) + 0.7)


def test_unknown_competition_is_a_clear_error(tmp_path, data, capsys):
    code = main(["mle", "run", "no-such-thing", write(tmp_path, COPY_SAMPLE), "--data", str(data)])
    assert code == 2 and "unknown competition 'no-such-thing'" in capsys.readouterr().err
