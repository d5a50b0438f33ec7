"""A malformed competition folder fails with a message naming the folder and the problem."""

from pathlib import Path

import pandas as pd
import pytest

from practicum.envs.mle.competitions.config import CompetitionError
from practicum.envs.mle.competitions.loading import list_competitions, load_folder

CONFIG = """\
id: wine-quality
name: Wine Quality
grader:
  name: rmse
  grade_fn: grade:grade
preparer: prepare:prepare
practicum:
  raw_source: inline
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "competitions" / "wine-quality"
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(CONFIG)
    (root / "description.md").write_text("# Wine quality\n")
    (root / "prepare.py").write_text("def prepare(raw, public, private):\n    pass\n")
    (root / "grade.py").write_text("def grade(submission, answers):\n    return 0.0\n")
    return root


def error(folder: Path) -> str:
    with pytest.raises(CompetitionError) as info:
        load_folder(folder)
    return str(info.value)


def test_a_well_formed_folder_loads(folder):
    assert load_folder(folder).id == "wine-quality"


def test_missing_grade_py(folder):
    (folder / "grade.py").unlink()
    assert error(folder) == f"competition 'wine-quality' is missing grade.py (looked in {folder}/)"


def test_missing_prepare_py(folder):
    (folder / "prepare.py").unlink()
    assert "competition 'wine-quality' is missing prepare.py" in error(folder)


def test_missing_config(folder):
    (folder / "config.yaml").unlink()
    assert (
        error(folder) == f"competition 'wine-quality' is missing config.yaml (looked in {folder}/)"
    )


def test_missing_description(folder):
    (folder / "description.md").unlink()
    assert "competition 'wine-quality' is missing description.md" in error(folder)


def test_bad_yaml_names_line(folder):
    (folder / "config.yaml").write_text("id: wine-quality\ngrader: [unclosed\n")
    message = error(folder)
    assert "competition 'wine-quality': config.yaml is not valid YAML at line 3" in message
    assert str(folder / "config.yaml") in message


def test_yaml_that_is_not_a_mapping(folder):
    (folder / "config.yaml").write_text("- just\n- a list\n")
    assert "config.yaml must be a mapping of keys, got list" in error(folder)


@pytest.mark.parametrize(
    "key, line",
    [
        ("id", "id: wine-quality\n"),
        ("name", "name: Wine Quality\n"),
        ("grader.name", "  name: rmse\n"),
    ],
)
def test_missing_required_key(folder, key, line):
    (folder / "config.yaml").write_text(CONFIG.replace(line, ""))
    assert f"config.yaml is missing key '{key}'" in error(folder)


def test_id_must_match_folder(folder):
    (folder / "config.yaml").write_text(CONFIG.replace("id: wine-quality", "id: wine-qualty"))
    assert "is named 'wine-quality' but its config.yaml says id 'wine-qualty'" in error(folder)


def test_bad_grade_fn_reference(folder):
    (folder / "config.yaml").write_text(
        CONFIG.replace("grade_fn: grade:grade", "grade_fn: grade.grade")
    )
    assert "config.yaml key 'grader.grade_fn': expected 'module:function'" in error(folder)


def test_unknown_practicum_key_is_named(folder):
    (folder / "config.yaml").write_text(CONFIG + "  directon: lower\n")
    assert "config.yaml key 'practicum.directon': Extra inputs are not permitted" in error(folder)


def test_bad_direction_value(folder):
    (folder / "config.yaml").write_text(CONFIG + "  direction: sideways\n")
    assert "practicum.direction" in error(folder)


def test_unknown_metric_without_direction(folder):
    (folder / "config.yaml").write_text(CONFIG.replace("name: rmse", "name: quadratic-kappa"))
    assert "cannot tell whether lower quadratic-kappa is better" in error(folder)


def test_leaderboard_without_score_column(folder):
    pd.DataFrame({"points": [1, 2]}).to_csv(folder / "leaderboard.csv", index=False)
    assert "leaderboard.csv has no 'score' column" in error(folder)


def test_leaderboard_lfs_pointer(folder):
    (folder / "leaderboard.csv").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:ab\n"
    )
    assert "is a Git LFS pointer" in error(folder)


def test_leaderboard_in_the_wrong_order(folder):
    (folder / "config.yaml").write_text(CONFIG + "  direction: lower\n")
    pd.DataFrame({"score": [3.0, 2.0, 1.0]}).to_csv(folder / "leaderboard.csv", index=False)
    assert "must list the best score first, but rmse is lower-is-better" in error(folder)


def test_without_explicit_direction_the_leaderboard_decides(folder):
    # MLE-bench's rule: lower is better iff the first (best) score is below the last
    pd.DataFrame({"score": [3.0, 2.0, 1.0]}).to_csv(folder / "leaderboard.csv", index=False)
    assert load_folder(folder).lower_is_better is False


def test_list_competitions_raises_on_a_broken_user_folder(folder):
    (folder / "grade.py").unlink()
    with pytest.raises(CompetitionError, match="missing grade.py"):
        list_competitions([folder.parent])


def test_grade_py_that_does_not_import_is_a_competition_error(folder, tmp_path):
    (folder / "grade.py").write_text(
        "import not_a_real_module_xyz\n\ndef grade(s, a):\n    return 0.0\n"
    )
    comp = load_folder(folder)
    with pytest.raises(CompetitionError, match="cannot load grader.grade_fn .*ModuleNotFoundError"):
        comp.grade(pd.DataFrame({"id": [1]}), pd.DataFrame({"id": [1]}))
