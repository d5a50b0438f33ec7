"""`practicum mle list | prepare | grade` wired into an argparse tree as the main CLI does."""

import argparse
import json
import warnings

import pandas as pd
import pytest

from practicum.envs.mle.cli import add_mle_commands
from practicum.envs.mle.competitions.config import CompetitionError
from practicum.errors import PracticumError


def test_list_shows_bundled_competitions(cli, capsys):
    assert cli(["mle", "list"]) == 0
    out = capsys.readouterr().out
    assert "iris-species" in out and "health-insurance-visits" in out and "rmsle" in out


def test_list_reports_a_broken_user_folder(cli, tmp_path, capsys):
    broken = tmp_path / "comps" / "half-done"
    broken.mkdir(parents=True)
    (broken / "grade.py").write_text("")
    assert cli(["mle", "list", "--competitions", str(tmp_path / "comps")]) == 1
    out = capsys.readouterr().out
    assert "half-done" in out and "missing config.yaml" in out


def test_prepare_then_grade(cli, tmp_path, capsys):
    data = tmp_path / "data"
    assert cli(["mle", "prepare", "iris-species", "--data", str(data)]) == 0
    assert "answers.csv" in capsys.readouterr().out
    # --data DIR means what PRACTICUM_DATA=DIR means: DIR/mle/<id>/prepared
    answers = pd.read_csv(data / "mle" / "iris-species" / "prepared" / "private" / "answers.csv")
    submission = tmp_path / "submission.csv"
    answers.to_csv(submission, index=False)
    assert (
        cli(["mle", "grade", "iris-species", str(submission), "--data", str(data), "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["score"] == 1.0 and report["medal"] == "gold"
    assert (
        cli(
            [
                "mle",
                "grade",
                "iris-species",
                str(submission),
                "--data",
                str(data),
                "--raw",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert "gold" in capsys.readouterr().out


def test_grade_invalid_submission_exits_1_with_reason(cli, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,species\n1,setosa\n")
    assert cli(["mle", "grade", "iris-species", str(bad), "--data", str(tmp_path / "d")]) == 1
    assert "test set has 45" in capsys.readouterr().out


def test_unknown_competition_is_a_user_error(cli, tmp_path):
    with pytest.raises(CompetitionError, match="unknown competition 'no-such-thing'") as err:
        cli(["mle", "prepare", "no-such-thing", "--data", str(tmp_path)])
    assert isinstance(err.value, PracticumError) and "\n" not in str(err.value)


def test_missing_competitions_folder_is_a_user_error(cli, tmp_path):
    with pytest.raises(PracticumError, match="does not exist"):
        cli(["mle", "list", "--competitions", str(tmp_path / "nowhere")])


def test_add_mle_commands_accepts_the_mle_parser_itself(tmp_path):
    parser = argparse.ArgumentParser(prog="mle")
    add_mle_commands(parser)
    args = parser.parse_args(
        [
            "prepare",
            "iris-species",
            "--raw",
            str(tmp_path),
            "--force",
            "--competitions",
            "a",
            "--competitions",
            "b",
        ]
    )
    assert args.force and args.raw == tmp_path and [str(p) for p in args.competitions] == ["a", "b"]


def test_non_numeric_regression_value_is_invalid_with_a_reason(cli, tmp_path, capsys):
    data = tmp_path / "data"
    assert cli(["mle", "prepare", "diabetes-progression", "--data", str(data)]) == 0
    capsys.readouterr()
    sample = data / "mle" / "diabetes-progression" / "prepared" / "public" / "sample_submission.csv"
    frame = pd.read_csv(sample).astype({"progression": object})
    frame.loc[0, "progression"] = "lots"
    bad = tmp_path / "bad.csv"
    frame.to_csv(bad, index=False)
    assert cli(["mle", "grade", "diabetes-progression", str(bad), "--data", str(data)]) == 1
    assert "must be numeric; got 'lots'" in capsys.readouterr().out


def test_grade_names_the_line_of_the_file_not_the_sorted_row(cli, tmp_path, capsys):
    data = tmp_path / "data"
    assert cli(["mle", "prepare", "breast-cancer-diagnosis", "--data", str(data)]) == 0
    capsys.readouterr()
    public = data / "mle" / "breast-cancer-diagnosis" / "prepared" / "public"
    frame = pd.read_csv(public / "sample_submission.csv")
    # the file's order is not id order: the line of the bad value differs from its sorted row
    frame = frame.sort_values("id", key=lambda ids: ids.astype(str), ascending=False)
    frame.iloc[1, frame.columns.get_loc("malignant")] = 1.5  # the file's line 3
    bad = tmp_path / "bad.csv"
    frame.to_csv(bad, index=False)
    assert (
        cli(["mle", "grade", "breast-cancer-diagnosis", str(bad), "--data", str(data), "--json"])
        == 1
    )
    reason = json.loads(capsys.readouterr().out)["reason"]
    assert reason.endswith("found 1.5 in line 3 of the submission file")


def test_grade_of_a_huge_prediction_is_invalid_without_a_numpy_warning(cli, tmp_path, capsys):
    data = tmp_path / "data"
    assert cli(["mle", "prepare", "diabetes-progression", "--data", str(data)]) == 0
    capsys.readouterr()
    sample = data / "mle" / "diabetes-progression" / "prepared" / "public" / "sample_submission.csv"
    frame = pd.read_csv(sample)
    frame.loc[1, "progression"] = 1e308
    bad = tmp_path / "big.csv"
    frame.to_csv(bad, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning would fail the test here
        assert (
            cli(["mle", "grade", "diabetes-progression", str(bad), "--data", str(data), "--json"])
            == 1
        )
    assert "not a finite score" in json.loads(capsys.readouterr().out)["reason"]
