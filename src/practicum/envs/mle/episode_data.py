"""What the episodes of a competition share: its prepared files, answers, template and the host
paths the sandbox must hide, loaded once per process; and fresh work folders holding only the
public files.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from practicum.envs.mle.actions.section import section_template
from practicum.envs.mle.actions.sklearn_template import default_template
from practicum.envs.mle.actions.template import Template
from practicum.envs.mle.competitions import source_data
from practicum.envs.mle.competitions.competition import Competition
from practicum.envs.mle.competitions.config import CompetitionError
from practicum.envs.mle.competitions.loading import load_folder
from practicum.envs.mle.competitions.prepared_data import PreparedPaths, read_answers
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError
from practicum.envs.mle.credit.evidence import Sizes

log = logging.getLogger(__name__)

_KINDS = {
    "binary": "classification",
    "multiclass": "classification",
    "classification": "classification",
    "regression": "regression",
    "text-classification": "classification",
    "text_classification": "classification",
}


@dataclass
class CompetitionData:
    """A prepared competition, loaded once per process and shared by environments."""

    comp: Competition
    paths: PreparedPaths
    answers: pd.DataFrame
    template: Template | None
    """The template-mode script; None when config.yaml names no target column."""
    hidden: tuple[Path, ...]
    """Host paths unreadable inside the sandbox: the private folder, the whole data root, and
    the public source data of the bundled competitions (`source_data.hidden_paths`)."""

    sizes: Sizes | None = None
    """Rows of train.csv and test.csv: what milestone evidence is checked against."""
    anchors: tuple[float, float] | None = None
    """(score of the sample submission, best leaderboard score): the normalised score's 0 and
    1 (`rewards.normalise_score`); None without a leaderboard or a gradable sample."""
    section: Template | None = None
    """The section-mode script (`actions.section`); None like `template`."""
    columns: tuple[str, ...] = ()
    """Column names of train.csv (shown in section-mode prompts)."""

    @property
    def kind(self) -> str:
        return _KINDS.get((self.comp.practicum.task or "").lower(), "classification")

    def new_workdir(self, root: str | Path | None = None) -> Path:
        """A fresh folder (in `root`, default the system temp folder) holding copies of the
        public files only.

        Copies, not hard links: the sandbox user is given ownership of everything in its
        workdir, and a hard link would hand it the cached public file itself (to corrupt for
        later episodes).
        """
        if root:
            Path(root).mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="practicum-mle-", dir=root))
        for src in sorted(self.paths.public.iterdir()):
            if src.is_file() and not src.is_symlink():
                shutil.copyfile(src, workdir / src.name)
        return workdir


def load_competition_data(comp: Competition, data_root: Path | None) -> CompetitionData:
    """Prepare (cached on disk) and load what an episode needs: public files, answers, template."""
    paths = comp.prepare(data_root)
    answers = read_answers(paths.answers)
    template = section = None
    extra = comp.practicum
    if extra.target_columns:
        args = (
            extra.task or "classification",
            extra.target_columns[0],
            extra.id_column,
            comp.metric,
        )
        try:
            template, section = default_template(*args), section_template(*args)
        except ValueError as err:
            log.warning("competition %s has no template: %s", comp.id, err)
    root = paths.public.parent.parent.parent  # <data root>/<id>/prepared/public
    hidden = (paths.private, root, *source_data.hidden_paths())
    sizes = Sizes(_rows(paths.public / "train.csv"), _rows(paths.public / "test.csv"))
    train = paths.public / "train.csv"
    columns = tuple(pd.read_csv(train, nrows=0).columns) if train.is_file() else ()
    return CompetitionData(
        comp,
        paths,
        answers,
        template,
        hidden,
        sizes,
        score_anchors(comp, paths, answers),
        section,
        columns,
    )


def _rows(path: Path) -> int:
    return len(pd.read_csv(path)) if path.is_file() else 0


def score_anchors(
    comp: Competition, paths: PreparedPaths, answers: pd.DataFrame
) -> tuple[float, float] | None:
    """(sample submission's score, best leaderboard score), or None (see CompetitionData)."""
    if not comp.leaderboard or paths.sample_submission is None:
        return None
    try:
        no_ml = comp.grade(paths.sample_submission, answers)
    except InvalidSubmissionError as err:
        log.warning(
            "competition %s: its sample submission is not gradable (%s): raw scores", comp.id, err
        )
        return None
    return (no_ml, float(comp.leaderboard[0]))


class CompetitionCache:
    """Competition id -> CompetitionData, prepared and loaded on first use (thread-safe)."""

    def __init__(self, folders: dict[str, Path], data_root: Path | None):
        self.folders, self.data_root = folders, data_root
        self._loaded: dict[str, CompetitionData] = {}
        self._lock = threading.Lock()

    def __getitem__(self, cid: str) -> CompetitionData:
        with self._lock:
            if cid not in self._loaded:
                if cid not in self.folders:
                    raise CompetitionError(
                        f"unknown competition '{cid}' (known: {', '.join(sorted(self.folders))})"
                    )
                comp = load_folder(self.folders[cid])
                self._loaded[cid] = load_competition_data(comp, self.data_root)
            return self._loaded[cid]
