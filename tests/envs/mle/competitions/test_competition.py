"""Loading, preparing and grading one competition; the registry's search order."""

import os
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from practicum.envs.mle.competitions.competition import Competition
from practicum.envs.mle.competitions.config import CompetitionError
from practicum.envs.mle.competitions.grading import grade_submission
from practicum.envs.mle.competitions.loading import list_competitions, load_competition
from practicum.envs.mle.competitions.prepared_data import MARKER, default_data_root
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError

TOY_CONFIG = """\
id: {cid}
name: Toy {cid}
competition_type: simple
awards_medals: true
prizes: null
description: description.md
dataset:
  answers: {cid}/prepared/private/answers.csv
  sample_submission: {cid}/prepared/public/sample_submission.csv
grader:
  name: rmse
  grade_fn: grade:grade
preparer: prepare:prepare
practicum:
  raw_source: inline
"""

TOY_PREPARE = """\
import pandas as pd

def prepare(raw, public, private):
    frame = pd.DataFrame({"id": [1, 2, 3, 4], "x": [1.0, 2.0, 3.0, 4.0], "y": [2.0, 4.0, 6.0, 8.0]})
    frame.iloc[:2].to_csv(public / "train.csv", index=False)
    frame.iloc[2:][["id", "x"]].to_csv(public / "test.csv", index=False)
    frame.iloc[2:][["id"]].assign(y=0.0).to_csv(public / "sample_submission.csv", index=False)
    frame.iloc[2:][["id", "y"]].to_csv(private / "answers.csv", index=False)
"""

TOY_GRADE = """\
from practicum.envs.mle.competitions.metrics import rmse
from practicum.envs.mle.competitions.submission_checks import align_submission, numeric_values

def grade(submission, answers):
    sub, ans = align_submission(submission, answers, "id", ["y"])
    return rmse(ans["y"].to_numpy(dtype=float), numeric_values(sub, ["y"])[:, 0])
"""


def write_toy(root: Path, cid: str = "toy-double", leaderboard=(0.0, 1.0, 2.0, 3.0)) -> Path:
    folder = root / cid
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(TOY_CONFIG.format(cid=cid))
    (folder / "description.md").write_text("# Toy\nPredict y = 2x.\n")
    (folder / "prepare.py").write_text(TOY_PREPARE)
    (folder / "grade.py").write_text(TOY_GRADE)
    if leaderboard:
        pd.DataFrame({"score": list(leaderboard)}).to_csv(folder / "leaderboard.csv", index=False)
    return folder


@pytest.fixture
def toy(tmp_path) -> Competition:
    return load_competition(write_toy(tmp_path / "comps"))


def test_load_reads_config_description_and_direction(toy):
    assert toy.id == "toy-double" and toy.name == "Toy toy-double"
    assert toy.metric == "rmse" and toy.lower_is_better is True
    assert toy.description.startswith("# Toy")
    assert toy.leaderboard == [0.0, 1.0, 2.0, 3.0]


def test_prepare_writes_mlebench_layout_and_is_idempotent(toy, tmp_path):
    paths = toy.prepare(tmp_path / "data")
    assert paths.public == tmp_path / "data" / "toy-double" / "prepared" / "public"
    assert sorted(p.name for p in paths.public.iterdir()) == [
        "sample_submission.csv",
        "test.csv",
        "train.csv",
    ]
    assert paths.answers == paths.private / "answers.csv" and paths.answers.is_file()
    assert (paths.public.parent / MARKER).is_file()
    (paths.public / "train.csv").write_text("edited")
    toy.prepare(tmp_path / "data")  # already prepared: left alone
    assert (paths.public / "train.csv").read_text() == "edited"
    toy.prepare(tmp_path / "data", force=True)
    assert (paths.public / "train.csv").read_text().startswith("id,x,y")


def test_prepare_verifies_checksums(toy, tmp_path):
    (toy.root / "checksums.yaml").write_text(yaml.safe_dump({"private": {"answers.csv": "0" * 32}}))
    with pytest.raises(CompetitionError, match=r"answers.csv has MD5 \w+, expected 0{32}"):
        toy.prepare(tmp_path / "data")
    assert not (tmp_path / "data" / "toy-double" / "prepared").exists()  # nothing half-done left
    (toy.root / "checksums.yaml").write_text(yaml.safe_dump({"public": {"extra.csv": "0" * 32}}))
    with pytest.raises(CompetitionError, match="extra.csv was not produced"):
        toy.prepare(tmp_path / "data")


def test_grade_scores_and_medals(toy, tmp_path):
    answers = toy.prepare(tmp_path / "data").answers
    perfect = pd.DataFrame({"id": [4, 3], "y": [8.0, 6.0]})
    assert toy.grade(perfect, answers) == 0.0
    assert toy.grade(pd.DataFrame({"id": [3, 4], "y": [7.0, 9.0]}), answers) == 1.0
    # leaderboard [0, 1, 2, 3], N=4: gold position 1, silver 1, bronze 1 -> only 0.0 medals
    assert toy.medal(0.0) == "gold" and toy.medal(0.5) is None


def test_grade_rejects_bad_submissions_with_reasons(toy, tmp_path):
    answers = toy.prepare(tmp_path / "data").answers
    with pytest.raises(InvalidSubmissionError, match="missing column"):
        toy.grade(pd.DataFrame({"id": [3, 4]}), answers)
    with pytest.raises(InvalidSubmissionError, match="no submission file"):
        toy.grade(tmp_path / "nothing.csv", answers)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InvalidSubmissionError, match="is empty"):
        toy.grade(tmp_path / "empty.csv", answers)


def test_grade_submission_report(toy, tmp_path):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    pd.DataFrame({"id": [3, 4], "y": [6.0, 8.0]}).to_csv(good, index=False)
    pd.DataFrame({"id": [3, 4], "y": ["six", 8.0]}).to_csv(bad, index=False)
    report = grade_submission(toy, good, data_root=tmp_path / "data")
    assert report.valid and report.score == 0.0 and report.medal == "gold"
    assert report.above_median is True and report.thresholds["n_teams"] == 4
    report = grade_submission(toy, bad, data_root=tmp_path / "data")
    assert not report.valid and report.score is None and report.medal is None
    assert "'y' must be numeric; got 'six'" in report.reason
    assert report.to_dict()["reason"] == report.reason


def test_grader_exception_counts_as_invalid(toy, tmp_path):
    (toy.root / "grade.py").write_text(
        "def grade(submission, answers):\n    raise KeyError('boom')\n"
    )
    with pytest.raises(InvalidSubmissionError, match="grader could not score .*KeyError"):
        toy.grade(
            pd.DataFrame({"id": [3, 4], "y": [6.0, 8.0]}), toy.prepare(tmp_path / "data").answers
        )


def test_grader_returning_nan_is_invalid(toy, tmp_path):
    (toy.root / "grade.py").write_text("def grade(submission, answers):\n    return float('nan')\n")
    with pytest.raises(InvalidSubmissionError, match="returned NaN"):
        toy.grade(
            pd.DataFrame({"id": [3, 4], "y": [6.0, 8.0]}), toy.prepare(tmp_path / "data").answers
        )


def test_grader_returning_inf_is_invalid_with_a_reason(toy, tmp_path):
    (toy.root / "grade.py").write_text("def grade(submission, answers):\n    return float('inf')\n")
    with pytest.raises(InvalidSubmissionError, match="returned inf .*not a finite score"):
        toy.grade(
            pd.DataFrame({"id": [3, 4], "y": [6.0, 8.0]}), toy.prepare(tmp_path / "data").answers
        )


def test_infinite_predictions_are_invalid_before_any_grader_runs(toy, tmp_path):
    answers = toy.prepare(tmp_path / "data").answers
    with pytest.raises(InvalidSubmissionError, match="column 'y' holds infinite values"):
        toy.grade(pd.DataFrame({"id": [3, 4], "y": [6.0, float("inf")]}), answers)


def test_default_data_root_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PRACTICUM_DATA", str(tmp_path))
    assert default_data_root() == tmp_path / "mle"
    monkeypatch.delenv("PRACTICUM_DATA")
    assert default_data_root() == Path.home() / ".cache" / "practicum" / "mle"


def test_registry_search_order(monkeypatch, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    write_toy(first, "toy-a", leaderboard=(0.0, 1.0))
    write_toy(second, "toy-a", leaderboard=(0.0, 5.0))
    write_toy(second, "toy-b")
    monkeypatch.setenv("PRACTICUM_COMPETITIONS", os.pathsep.join([str(second)]))
    comps = {c.id: c for c in list_competitions([first])}
    assert {"toy-a", "toy-b", "iris-species"} <= set(comps)
    assert comps["toy-a"].root == first / "toy-a"  # extra_dirs shadow $PRACTICUM_COMPETITIONS
    assert load_competition("toy-b").root == second / "toy-b"
    assert load_competition(str(second / "toy-a")).leaderboard == [0.0, 5.0]  # by path


def test_a_single_competition_folder_can_be_an_extra_dir(tmp_path):
    folder = write_toy(tmp_path, "toy-single")
    assert load_competition("toy-single", [folder]).root == folder


def test_unknown_id_lists_known_ones(tmp_path):
    with pytest.raises(
        CompetitionError, match=r"unknown competition 'nope' \(known: .*iris-species"
    ):
        load_competition("nope")
    with pytest.raises(CompetitionError, match="competitions folder .* does not exist"):
        list_competitions([tmp_path / "missing"])


def test_prepare_needs_raw_dir_when_no_package_source(tmp_path):
    folder = write_toy(tmp_path, "toy-raw")
    (folder / "config.yaml").write_text(
        TOY_CONFIG.format(cid="toy-raw").replace("raw_source: inline", "needs_raw: true")
    )
    comp = load_competition(folder)
    with pytest.raises(
        CompetitionError, match=r"prepared from raw files, but .*raw does not exist.*--raw DIR"
    ):
        comp.prepare(tmp_path / "data")
    (tmp_path / "r").mkdir()
    assert comp.prepare(tmp_path / "data", raw=tmp_path / "r").answers.is_file()


def test_failing_prepare_names_the_competition(tmp_path):
    folder = write_toy(tmp_path, "toy-fail")
    (folder / "prepare.py").write_text(
        textwrap.dedent("""
        def prepare(raw, public, private):
            raise RuntimeError("disk on fire")
    """)
    )
    with pytest.raises(
        CompetitionError,
        match="prepare.py of competition 'toy-fail' failed: RuntimeError: disk on fire",
    ):
        load_competition(folder).prepare(tmp_path / "data")
