"""Competition folders written exactly as in MLE-bench's repository load and grade without
the `mlebench` package (our stand-in modules take its place)."""

import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from practicum.envs.mle.competitions import mlebench_compat
from practicum.envs.mle.competitions.config import CompetitionError
from practicum.envs.mle.competitions.grading import grade_submission
from practicum.envs.mle.competitions.loading import load_competition
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError

# --- a folder in MLE-bench's style: mlebench module paths, mlebench imports ------------------

SPACESHIP_CONFIG = """\
id: toy-spaceship
name: Toy Spaceship
competition_type: simple
awards_medals: true
prizes: null
description: mlebench/competitions/toy-spaceship/description.md

dataset:
  answers: toy-spaceship/prepared/private/test.csv
  sample_submission: toy-spaceship/prepared/public/sample_submission.csv

grader:
  name: accuracy
  grade_fn: mlebench.competitions.toy-spaceship.grade:grade

preparer: mlebench.competitions.toy-spaceship.prepare:prepare
"""

SPACESHIP_PREPARE = """\
from pathlib import Path

from sklearn.model_selection import train_test_split

from mlebench.utils import read_csv


def prepare(raw: Path, public: Path, private: Path):
    # Create train and test splits from train set
    old_train = read_csv(raw / "train.csv")
    new_train, new_test = train_test_split(old_train, test_size=0.25, random_state=0)

    # Create random example submission
    example_submission = new_test[["PassengerId", "Transported"]].copy()
    example_submission["Transported"] = False
    example_submission.to_csv(public / "sample_submission.csv", index=False)

    # Create private files
    new_test.to_csv(private / "test.csv", index=False)

    # Create public files visible to agents
    new_train.to_csv(public / "train.csv", index=False)
    new_test.drop("Transported", axis="columns").to_csv(public / "test.csv", index=False)
"""

SPACESHIP_GRADE = """\
import pandas as pd
from sklearn.metrics import accuracy_score

from mlebench.competitions.utils import prepare_for_accuracy_metric
from mlebench.grade_helpers import InvalidSubmissionError


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    if submission["Transported"].dtype != bool:
        raise InvalidSubmissionError("Transported must be True or False")
    accuracy_inputs = prepare_for_accuracy_metric(
        submission=submission, answers=answers, target_column="Transported", id_column="PassengerId"
    )
    return accuracy_score(**accuracy_inputs)
"""

# MLE-bench leaderboards are Kaggle exports: many columns, `score` among them, best first.
SPACESHIP_LEADERBOARD = """\
scoreNullable,teamId,hasTeamName,submissionDate,score,hasScore
0.9,1,True,2024-01-01 00:00:00,0.9,True
0.8,2,True,2024-01-01 00:00:00,0.8,True
0.7,3,True,2024-01-01 00:00:00,0.7,True
0.6,4,True,2024-01-01 00:00:00,0.6,True
0.5,5,True,2024-01-01 00:00:00,0.5,True
"""

# A log-loss competition whose grade.py imports a sibling module relatively, as
# leaf-classification's does (`from .classes import CLASSES`).
LEAF_CONFIG = SPACESHIP_CONFIG.replace("toy-spaceship", "toy-leaf").replace(
    "accuracy", "multi-class-log-loss"
)
LEAF_CLASSES = 'CLASSES = ["acer", "quercus"]\n'
LEAF_GRADE = """\
import numpy as np
import pandas as pd
from sklearn.metrics import log_loss

from mlebench.competitions.utils import df_to_one_hot, one_hot_dfs_to_log_loss_inputs
from mlebench.grade_helpers import InvalidSubmissionError

from .classes import CLASSES


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    if set(submission.columns) != {"id"} | set(CLASSES):
        raise InvalidSubmissionError(
            "Submission must have an 'id' column and a column for each class.")
    answers_one_hot = df_to_one_hot(answers, id_column="id", target_column="species",
                                    classes=CLASSES)
    inputs = one_hot_dfs_to_log_loss_inputs(submission, answers_one_hot, id_column="id",
                                            apply_softmax=False)
    return log_loss(**inputs)
"""
LEAF_PREPARE = """\
import pandas as pd


def prepare(raw, public, private):
    frame = pd.DataFrame({"id": [1, 2, 3, 4], "species": ["acer", "quercus", "acer", "acer"]})
    frame.to_csv(private / "test.csv", index=False)
    frame[["id"]].to_csv(public / "test.csv", index=False)
"""


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.fixture
def without_mlebench(monkeypatch):
    """Hide any real or earlier stand-in `mlebench`; restore sys.modules afterwards."""
    saved = {k: v for k, v in sys.modules.items() if k == "mlebench" or k.startswith("mlebench.")}
    for name in saved:
        del sys.modules[name]
    monkeypatch.setattr(mlebench_compat, "mlebench_installed", lambda: False)
    yield
    for name in [k for k in sys.modules if k == "mlebench" or k.startswith("mlebench.")]:
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.fixture
def spaceship(tmp_path) -> Path:
    folder = write(
        tmp_path / "competitions" / "toy-spaceship",
        {
            "config.yaml": SPACESHIP_CONFIG,
            "description.md": "# Spaceship\n",
            "prepare.py": SPACESHIP_PREPARE,
            "grade.py": SPACESHIP_GRADE,
            "leaderboard.csv": SPACESHIP_LEADERBOARD,
        },
    )
    rng = np.random.default_rng(0)
    raw = tmp_path / "data" / "toy-spaceship" / "raw"
    raw.mkdir(parents=True)
    pd.DataFrame(
        {
            "PassengerId": [f"{i:04d}_01" for i in range(40)],
            "Age": rng.integers(1, 80, 40),
            "Transported": rng.integers(0, 2, 40).astype(bool),
        }
    ).to_csv(raw / "train.csv", index=False)
    return folder


def test_mlebench_style_folder_prepares_and_grades(without_mlebench, spaceship, tmp_path):
    comp = load_competition("toy-spaceship", [spaceship.parent])
    assert comp.metric == "accuracy" and comp.lower_is_better is False  # from the leaderboard
    paths = comp.prepare(tmp_path / "data")  # raw files read from <data>/<id>/raw
    assert paths.answers == paths.private / "test.csv"
    answers = pd.read_csv(paths.answers)
    assert len(answers) == 10 and len(pd.read_csv(paths.public / "train.csv")) == 30

    perfect = answers[["PassengerId", "Transported"]].sample(frac=1.0, random_state=1)
    assert comp.grade(perfect, paths.answers) == 1.0
    assert getattr(sys.modules["mlebench"], mlebench_compat.SHIM_MARKER)  # the stand-in ran

    half = perfect.sort_values("PassengerId").reset_index(drop=True)
    half.loc[:4, "Transported"] = ~half.loc[:4, "Transported"]  # 5 of 10 wrong
    assert comp.grade(half, paths.answers) == 0.5

    with pytest.raises(InvalidSubmissionError, match="Transported must be True or False"):
        comp.grade(perfect.assign(Transported="yes"), paths.answers)
    with pytest.raises(InvalidSubmissionError, match="same length|rows"):
        comp.grade(perfect.iloc[:3], paths.answers)


def test_mlebench_style_report_has_medals(without_mlebench, spaceship, tmp_path):
    comp = load_competition(spaceship)
    submission = tmp_path / "submission.csv"
    paths = comp.prepare(tmp_path / "data")
    pd.read_csv(paths.answers)[["PassengerId", "Transported"]].to_csv(submission, index=False)
    report = grade_submission(comp, submission, data_root=tmp_path / "data")
    # N=5: gold position max(1, 0) = 1 -> 0.9; silver 1; bronze 2 -> 0.8
    assert report.valid and report.score == 1.0 and report.medal == "gold"
    assert comp.medal(0.85) == "bronze" and comp.medal(0.75) is None


def test_missing_raw_dir_is_explained(without_mlebench, spaceship, tmp_path):
    comp = load_competition(spaceship)
    with pytest.raises(CompetitionError, match="prepared from raw files.*--raw DIR"):
        comp.prepare(tmp_path / "elsewhere")


@pytest.mark.filterwarnings("ignore:.*y_pred.*:FutureWarning")  # MLE-bench passes y_pred=
def test_relative_import_and_log_loss_helpers(without_mlebench, tmp_path):
    folder = write(
        tmp_path / "toy-leaf",
        {
            "config.yaml": LEAF_CONFIG,
            "description.md": "# Leaf\n",
            "classes.py": LEAF_CLASSES,
            "grade.py": LEAF_GRADE,
            "prepare.py": LEAF_PREPARE,
        },
    )
    (tmp_path / "data" / "toy-leaf" / "raw").mkdir(parents=True)
    comp = load_competition(folder)
    assert comp.lower_is_better is True  # known metric name, no leaderboard
    answers = comp.prepare(tmp_path / "data").answers
    submission = pd.DataFrame(
        {"id": [4, 3, 2, 1], "acer": [0.5, 0.5, 0.5, 0.5], "quercus": [0.5] * 4}
    )
    assert comp.grade(submission, answers) == pytest.approx(np.log(2))
    with pytest.raises(InvalidSubmissionError, match="a column for each class"):
        comp.grade(submission.drop(columns="quercus"), answers)


def test_real_mlebench_error_class_is_translated(monkeypatch, tmp_path):
    """With a real mlebench installed its own InvalidSubmissionError class is raised."""
    theirs = type("InvalidSubmissionError", (Exception,), {})
    fake = types.ModuleType("mlebench.grade_helpers")
    fake.InvalidSubmissionError = theirs
    monkeypatch.setitem(sys.modules, "mlebench.grade_helpers", fake)
    assert theirs in mlebench_compat.invalid_submission_errors()
    folder = write(
        tmp_path / "toy-real",
        {
            "config.yaml": SPACESHIP_CONFIG.replace("toy-spaceship", "toy-real"),
            "description.md": "#\n",
            "prepare.py": "def prepare(raw, public, private):\n    pass\n",
            "grade.py": "from mlebench.grade_helpers import InvalidSubmissionError\n\n"
            "def grade(submission, answers):\n    raise InvalidSubmissionError('theirs')\n",
        },
    )
    monkeypatch.setitem(sys.modules, "mlebench", types.ModuleType("mlebench"))
    with pytest.raises(InvalidSubmissionError, match="theirs"):
        load_competition(folder).grade(pd.DataFrame({"a": [1]}), pd.DataFrame({"a": [1]}))


def test_shim_modules_and_helpers(without_mlebench):
    mlebench_compat.ensure_mlebench()
    from mlebench.competitions.utils import prepare_for_auroc_metric, prepare_for_rmsle_metric
    from mlebench.grade_helpers import InvalidSubmissionError as Theirs

    assert Theirs is InvalidSubmissionError
    answers = pd.DataFrame({"id": [1, 2], "y": [0, 1]})
    inputs = prepare_for_auroc_metric(
        pd.DataFrame({"id": [2, 1], "y": [0.9, 0.2]}), answers, id_col="id", target_col="y"
    )
    assert inputs["y_true"].tolist() == [0, 1] and inputs["y_score"].tolist() == [0.2, 0.9]
    with pytest.raises(InvalidSubmissionError, match=r"probabilities in \[0, 1\]"):
        prepare_for_auroc_metric(pd.DataFrame({"id": [1, 2], "y": [1.5, 0.2]}), answers, "id", "y")
    with pytest.raises(InvalidSubmissionError, match="must be >= 0"):
        prepare_for_rmsle_metric(pd.DataFrame({"id": [1, 2], "y": [-1, 0]}), answers, "y", "id")


def test_softmax_is_applied_unless_one_hot(without_mlebench):
    mlebench_compat.ensure_mlebench()
    from mlebench.competitions.utils import one_hot_dfs_to_log_loss_inputs

    answers = pd.DataFrame({"id": [1], "a": [1], "b": [0]})
    logits = pd.DataFrame({"id": [1], "a": [0.0], "b": [0.0]})
    assert one_hot_dfs_to_log_loss_inputs(logits, answers)["y_pred"].tolist() == [[0.5, 0.5]]
    onehot = pd.DataFrame({"id": [1], "a": [1.0], "b": [0.0]})
    assert one_hot_dfs_to_log_loss_inputs(onehot, answers)["y_pred"].tolist() == [[1.0, 0.0]]
