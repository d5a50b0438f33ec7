"""One loaded competition: prepare its data with prepare.py, grade with grade.py, award medals.

`Competition` objects come from `loading.load_folder` (one folder) or
`loading.load_competition` (by id); where prepared data lives is `prepared_data`'s job.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from practicum.envs.mle.competitions import medals, mlebench_compat, secret_transform
from practicum.envs.mle.competitions.config import (
    CompetitionError,
    PracticumSection,
    config_value,
    read_yaml,
)
from practicum.envs.mle.competitions.prepared_data import (
    MARKER,
    PreparedPaths,
    compare_checksums,
    default_data_root,
    move_into_place,
    read_answers,
    tree_checksums,
)
from practicum.envs.mle.competitions.submission_checks import (
    InvalidSubmissionError,
    read_submission,
)


@dataclass
class Competition:
    """One competition, loaded from its folder by `load_folder`."""

    id: str
    name: str
    root: Path
    """The competition folder (config.yaml, grade.py, ...)."""
    metric: str
    lower_is_better: bool
    config: dict
    """config.yaml as parsed."""
    description: str
    """description.md's text: what the agent is told."""
    leaderboard: list[float] | None = None
    """leaderboard.csv's scores, best first; None without one."""
    practicum: PracticumSection = field(default_factory=PracticumSection)

    # -- preparation ---------------------------------------------------------------------------

    def paths(self, data_root: Path | None = None) -> PreparedPaths:
        """Where `prepare(data_root)` puts (or put) the files; touches nothing."""
        prepared = Path(data_root or default_data_root()) / self.id / "prepared"
        public, private = prepared / "public", prepared / "private"
        dataset = self.config.get("dataset") or {}
        answers = Path(str(dataset.get("answers") or "answers.csv")).name
        sample = Path(str(dataset.get("sample_submission") or "sample_submission.csv")).name
        return PreparedPaths(public, private, private / answers, public / sample)

    def prepare(
        self, data_root: Path | None = None, raw: Path | None = None, force: bool = False
    ) -> PreparedPaths:
        """Run prepare.py once into `<data_root>/<id>/prepared/` and verify checksums.yaml.

        Idempotent: a finished preparation (marker file present) is returned as is unless
        `force`. Output is staged in a temporary folder and renamed into place, so concurrent
        callers never see half-written files.
        """
        paths = self.paths(data_root)
        prepared = paths.public.parent
        if force and prepared.exists():
            shutil.rmtree(prepared)
        encoding = self._encoding()
        if (prepared / MARKER).is_file():
            done = read_yaml(prepared / MARKER, self.id) or {}
            if done.get("encoding") == encoding:
                return paths
            shutil.rmtree(prepared)  # prepared under another secret (or none): redo
        raw = Path(raw) if raw else prepared.parent / "raw"
        needs_raw = self.practicum.needs_raw
        if needs_raw is None:
            needs_raw = self.practicum.raw_source is None
        if needs_raw and not raw.is_dir():
            raise CompetitionError(
                f"competition '{self.id}' is prepared from raw files, but {raw} does not exist: "
                f"put the competition's downloaded files there or pass --raw DIR"
            )
        prepared.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".prepared-", dir=prepared.parent))
        try:
            public, private = staging / "public", staging / "private"
            public.mkdir()
            private.mkdir()
            preparer = self._callable("preparer", "prepare:prepare")
            try:
                preparer(raw, public, private)
            except Exception as err:
                raise CompetitionError(
                    f"prepare.py of competition '{self.id}' failed: {type(err).__name__}: {err}"
                ) from err
            self._verify_checksums(tree_checksums(public, private))
            changed = self._encode(public, private, paths) if encoding else {}
            digests = tree_checksums(public, private)
            record = {"competition": self.id, "encoding": encoding, **changed, **digests}
            (staging / MARKER).write_text(yaml.safe_dump(record))
            move_into_place(staging, prepared)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return paths

    def _encoding(self) -> str | None:
        """Fingerprint of the secret this competition is re-encoded with; None when it is not."""
        if not self.practicum.secret_transform:
            return None
        return secret_transform.fingerprint(secret_transform.machine_secret())

    def _encode(self, public: Path, private: Path, paths: PreparedPaths) -> dict:
        section = self.practicum
        return secret_transform.apply(
            public,
            private,
            cid=self.id,
            id_column=section.id_column,
            targets=list(section.target_columns),
            task=section.task,
            answers_name=paths.answers.name,
            sample_name=paths.sample_submission.name,
            secret=secret_transform.machine_secret(),
        )

    def expected_checksums(self) -> dict | None:
        """checksums.yaml as parsed; None when the folder has none."""
        path = self.root / "checksums.yaml"
        if not path.is_file():
            return None
        data = read_yaml(path, self.id)
        if not isinstance(data, dict):
            raise CompetitionError(f"competition '{self.id}': {path} must be a mapping")
        return data

    def _verify_checksums(self, actual: dict) -> None:
        expected = self.expected_checksums()
        if expected is None:
            return
        problems = compare_checksums(expected, actual)
        if problems:
            raise CompetitionError(
                f"competition '{self.id}': prepared files do not match "
                f"{self.root / 'checksums.yaml'}: " + "; ".join(problems)
            )

    # -- grading -------------------------------------------------------------------------------

    def grade(
        self,
        submission: Path | str | pd.DataFrame,
        answers: Path | str | pd.DataFrame | None = None,
    ) -> float:
        """The submission's score by grade.py; raises InvalidSubmissionError(reason).

        `answers` defaults to the prepared answers under the default data root (prepared on
        demand). Any exception from grade.py counts as an invalid submission, as in MLE-bench;
        a grade.py that cannot be imported raises CompetitionError instead.
        """
        frame = read_submission(submission)
        if answers is None:
            answers = self.prepare().answers
        if not isinstance(answers, pd.DataFrame):
            answers = read_answers(Path(answers))
        grade_fn = self._callable("grader.grade_fn", "grade:grade")
        for column in frame.columns:
            values = frame[column]
            if pd.api.types.is_numeric_dtype(values) and np.isinf(values.to_numpy(float)).any():
                raise InvalidSubmissionError(
                    f"submission column '{column}' holds infinite values: predictions must be "
                    f"finite numbers"
                )
        try:
            # a far-out prediction (1e308) overflows inside the metric: the non-finite score
            # is reported below, so numpy's warning would only repeat it as noise
            with np.errstate(over="ignore", invalid="ignore"):
                score = grade_fn(frame, answers)
        except InvalidSubmissionError:
            raise
        except mlebench_compat.invalid_submission_errors() as err:  # the real mlebench's class
            raise InvalidSubmissionError(str(err)) from err
        except Exception as err:
            raise InvalidSubmissionError(
                f"the grader could not score this submission ({type(err).__name__}: {err})"
            ) from err
        try:
            score = float(score)
        except (TypeError, ValueError):
            raise InvalidSubmissionError(f"the grader returned {score!r}, not a number") from None
        if not math.isfinite(score):
            raise InvalidSubmissionError(
                f"the grader returned {'NaN' if math.isnan(score) else score} for this "
                f"submission, not a finite score "
                f"(are some predictions infinite, NaN or far out of range?)"
            )
        return score

    def medal_thresholds(self) -> dict | None:
        """`medals.medal_thresholds` of leaderboard.csv; None without a leaderboard."""
        return medals.medal_thresholds(self.leaderboard) if self.leaderboard else None

    def medal(self, score: float) -> str | None:
        """ "gold", "silver", "bronze" or None, by MLE-bench's rule over leaderboard.csv."""
        thresholds = self.medal_thresholds()
        if thresholds is None or score is None or math.isnan(score):
            return None
        return medals.medal_for(score, thresholds, self.lower_is_better)

    def _callable(self, key: str, default: str) -> Callable:
        reference = config_value(self.config, key) or default
        try:
            return mlebench_compat.load_callable(self.root, str(reference))
        except Exception as err:
            raise CompetitionError(
                f"competition '{self.id}': cannot load {key} {reference!r} from {self.root}: "
                f"{type(err).__name__}: {err}"
            ) from err
