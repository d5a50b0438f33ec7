"""`practicum mle run ID SOLUTION.py`: sandboxed, instrumented, graded, reported."""

from __future__ import annotations

import json

import pytest

from practicum.envs.mle.competitions.config import CompetitionError
from practicum.errors import ConfigError, PracticumError


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("mle-run-data")


def write(tmp_path, code: str):
    path = tmp_path / "solution.py"
    path.write_text(code)
    return str(path)


COPY_SAMPLE = "import shutil\nshutil.copyfile('sample_submission.csv', 'submission.csv')\n"


def test_valid_solution_prints_score_and_breakdown_as_json(cli, tmp_path, data, capsys):
    code = cli(
        ["mle", "run", "iris-species", write(tmp_path, COPY_SAMPLE), "--data", str(data), "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["valid"] and out["instrumenter"] == "rules"
    # the sample guesses one species everywhere: 15 of 45 test rows are right
    assert out["score"] == pytest.approx(1 / 3)
    assert out["milestones"] == []  # shutil is no data library; copyfile no known milestone
    # normalised per competition: the sample submission is the no-ML level, 0
    assert out["reward"]["total"] == pytest.approx(0.0, abs=1e-9)
    assert out["reward"]["score_credit"] == pytest.approx(0.0, abs=1e-9)
    assert out["medal"] is None
    assert out["competition"] == "iris-species" and out["metric"] == "accuracy"


def test_failing_solution_exits_1_and_shows_the_failure(cli, tmp_path, data, capsys):
    code = cli(
        [
            "mle",
            "run",
            "iris-species",
            write(tmp_path, "import os\nprint('hi')\n"),
            "--data",
            str(data),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "no submission.csv was written" in out and "-10" in out and "0/7" in out


def test_no_partial_credit_flag(cli, tmp_path, data, capsys):
    cli(
        [
            "mle",
            "run",
            "iris-species",
            write(tmp_path, "import os\n"),
            "--data",
            str(data),
            "--json",
            "--no-partial-credit",
        ]
    )
    assert json.loads(capsys.readouterr().out)["reward"]["total"] == -10.0


def test_section_mode_runs_a_section(cli, tmp_path, data, capsys):
    section = (
        "features = [c for c in train.columns if c not in (TARGET, ID_COL)]\n"
        "model = Ridge().fit(train[features], train[TARGET])\n"
        "predictions = model.predict(train[features])\n"
    )  # the training rows
    code = cli(
        [
            "mle",
            "run",
            "diabetes-progression",
            write(tmp_path, section),
            "--mode",
            "section",
            "--data",
            str(data),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["valid"] and "model_trained" in out["milestones"]
    assert "must have one row per test row" in out["observation"]


def test_template_mode_runs_a_region(cli, tmp_path, data, capsys):
    code = cli(
        [
            "mle",
            "run",
            "diabetes-progression",
            write(tmp_path, "model = Ridge()\n"),
            "--mode",
            "template",
            "--data",
            str(data),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["milestones"]) == 7 and 40 < out["score"] < 80
    # RMSE normalised: 0 at the sample submission (~88), 1 at the best baseline (~58)
    assert 0.7 < out["reward"]["score_credit"] < 1.1
    assert out["reward"]["total"] == pytest.approx(out["reward"]["score_credit"] + 0.7)
    assert out["medal"] in ("gold", "silver", "bronze")


def test_the_table_shows_the_medal_and_raw_is_accepted(cli, tmp_path, data, capsys):
    code = cli(
        [
            "mle",
            "run",
            "iris-species",
            write(tmp_path, "model = LogisticRegression()\n"),
            "--mode",
            "template",
            "--data",
            str(data),
            "--raw",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "medal" in out


def test_unparsable_region_shows_why(cli, tmp_path, data, capsys):
    code = cli(
        [
            "mle",
            "run",
            "iris-species",
            write(tmp_path, "clf = Ridge(\n"),
            "--mode",
            "template",
            "--data",
            str(data),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "unparsable reply" in out and "SyntaxError" in out


def test_unknown_competition_is_a_clear_error(cli, tmp_path, data):
    with pytest.raises(CompetitionError, match="unknown competition 'no-such-thing'"):
        cli(["mle", "run", "no-such-thing", write(tmp_path, COPY_SAMPLE), "--data", str(data)])


def test_missing_solution_file_is_a_user_error(cli, tmp_path, data):
    with pytest.raises(PracticumError, match="solution file .*nope.py does not exist"):
        cli(["mle", "run", "iris-species", str(tmp_path / "nope.py"), "--data", str(data)])


@pytest.mark.parametrize("spec", ["base", "policy"])
def test_live_policy_instrumenters_point_to_a_local_model(cli, tmp_path, data, spec):
    with pytest.raises(PracticumError, match="local:smollm2-135m-instruct"):
        cli(
            [
                "mle",
                "run",
                "iris-species",
                write(tmp_path, COPY_SAMPLE),
                "--data",
                str(data),
                "--instrumenter",
                spec,
            ]
        )


def test_bad_instrumenter_spec_names_the_flag(cli, tmp_path, data):
    with pytest.raises(ConfigError, match="--instrumenter: expected"):
        cli(
            [
                "mle",
                "run",
                "iris-species",
                write(tmp_path, COPY_SAMPLE),
                "--data",
                str(data),
                "--instrumenter",
                "gpt",
            ]
        )


def test_non_utf8_solution_file_is_a_user_error(cli, tmp_path, data):
    path = tmp_path / "solution.py"
    path.write_bytes("# caf\xe9\nmodel = Ridge()\n".encode("latin-1"))
    with pytest.raises(PracticumError, match="solution file .*solution.py is not UTF-8 text"):
        cli(["mle", "run", "iris-species", str(path), "--data", str(data)])
