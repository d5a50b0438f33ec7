"""Competitions in MLE-bench's folder layout: load, prepare, grade, award medals.

A competition is a folder `<id>/` holding
    config.yaml       MLE-bench keys (id, name, competition_type, awards_medals, prizes,
                      description, dataset.{answers, sample_submission}, grader.{name, grade_fn},
                      preparer) plus an optional `practicum:` section (see PracticumSection)
    description.md    what the agent reads: task, files, submission format, metric
    prepare.py        prepare(raw: Path, public: Path, private: Path)
    grade.py          grade(submission: DataFrame, answers: DataFrame) -> float
    leaderboard.csv   optional, column `score`, best first: medal thresholds
    checksums.yaml    optional, MD5 of every prepared file: {public: {...}, private: {...}}
Folders copied from MLE-bench's repository load unchanged (see mlebench_compat).

Prepared data lives in `<data root>/<id>/prepared/{public,private}` (MLE-bench's layout), the
data root being the `data_root` argument, else `$PRACTICUM_DATA/mle`, else
`~/.cache/practicum/mle`. Raw files, for competitions that need them, are read from
`<data root>/<id>/raw` or the `raw` argument; bundled competitions build their data from
packages and ignore `raw`.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, Field, ValidationError

from practicum.envs.mle import grading, mlebench_compat
from practicum.envs.mle.grading import InvalidSubmissionError, read_submission

MARKER = ".practicum-prepared.yaml"
"""Written into `prepared/` last: its presence means preparation finished."""


class CompetitionError(Exception):
    """A competition folder or its data is unusable (not the submission's fault)."""


class PracticumSection(BaseModel, extra="forbid"):
    """The optional `practicum:` section of config.yaml (our additions to MLE-bench's keys)."""

    direction: Literal["lower", "higher"] | None = Field(
        None, description="Whether lower or higher scores are better; else inferred."
    )
    metric: str | None = Field(None, description="Metric name; defaults to grader.name.")
    task: str | None = Field(
        None, description="binary, multiclass, regression or text-classification (informative)."
    )
    id_column: str = Field("id", description="Column naming each test row.")
    target_columns: list[str] = Field(
        default_factory=list, description="Columns of private/answers.csv holding the truth."
    )
    submission_columns: list[str] = Field(
        default_factory=list, description="Columns a submission must have, id first."
    )
    raw_source: str | None = Field(
        None, description="Where the data comes from when not from raw files (e.g. a package)."
    )
    needs_raw: bool | None = Field(
        None, description="Whether prepare() needs a raw dir; default: raw_source is unset."
    )
    rows: int | None = Field(None, description="Rows in train + test (informative).")
    seed: int | None = Field(None, description="random_state of the train/test split.")


@dataclass
class PreparedPaths:
    """Where a prepared competition's files are."""

    public: Path
    """train.csv, test.csv, sample_submission.csv: everything the agent may read."""
    private: Path
    """The answers: never shown to the agent."""
    answers: Path | None = None
    """The answers file inside `private`."""
    sample_submission: Path | None = None
    """The sample submission inside `public`."""


def default_data_root() -> Path:
    """`$PRACTICUM_DATA/mle` if set, else `~/.cache/practicum/mle`."""
    base = os.environ.get("PRACTICUM_DATA")
    return Path(base) / "mle" if base else Path.home() / ".cache" / "practicum" / "mle"


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
        if (prepared / MARKER).is_file():
            return paths
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
            digests = tree_checksums(public, private)
            self._verify_checksums(digests)
            (staging / MARKER).write_text(yaml.safe_dump({"competition": self.id, **digests}))
            _move_into_place(staging, prepared)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return paths

    def expected_checksums(self) -> dict | None:
        """checksums.yaml as parsed; None when the folder has none."""
        path = self.root / "checksums.yaml"
        if not path.is_file():
            return None
        data = _read_yaml(path, self.id)
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
        try:
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
        if math.isnan(score):
            raise InvalidSubmissionError("the grader returned NaN for this submission")
        return score

    def medal_thresholds(self) -> dict | None:
        """`grading.medal_thresholds` of leaderboard.csv; None without a leaderboard."""
        return grading.medal_thresholds(self.leaderboard) if self.leaderboard else None

    def medal(self, score: float) -> str | None:
        """ "gold", "silver", "bronze" or None, by MLE-bench's rule over leaderboard.csv."""
        thresholds = self.medal_thresholds()
        if thresholds is None or score is None or math.isnan(score):
            return None
        return grading.medal_for(score, thresholds, self.lower_is_better)

    def _callable(self, key: str, default: str) -> Callable:
        reference = _get(self.config, key) or default
        try:
            return mlebench_compat.load_callable(self.root, str(reference))
        except Exception as err:
            raise CompetitionError(
                f"competition '{self.id}': cannot load {key} {reference!r} from {self.root}: "
                f"{type(err).__name__}: {err}"
            ) from err


# -----------------------------------------------------------------------------------------------
# Loading folders.

REQUIRED_KEYS = ("id", "name", "grader.name")


def load_folder(folder: Path) -> Competition:
    """Load and check one competition folder; CompetitionError names whatever is wrong."""
    folder = Path(folder)
    where = f"(looked in {folder}/)"
    if not folder.is_dir():
        raise CompetitionError(f"competition folder {folder} does not exist")
    config_path = folder / "config.yaml"
    if not config_path.is_file():
        raise CompetitionError(f"competition '{folder.name}' is missing config.yaml {where}")
    config = _read_yaml(config_path, folder.name)
    if not isinstance(config, dict):
        raise CompetitionError(
            f"competition '{folder.name}': config.yaml must be a mapping of keys, "
            f"got {type(config).__name__} ({config_path})"
        )
    for key in REQUIRED_KEYS:
        if _get(config, key) in (None, ""):
            raise CompetitionError(
                f"competition '{folder.name}': config.yaml is missing key '{key}' ({config_path})"
            )
    cid = str(config["id"])
    if cid != folder.name:
        raise CompetitionError(
            f"competition folder {folder} is named '{folder.name}' but its config.yaml says "
            f"id '{cid}': they must match"
        )
    for key, default in (("grader.grade_fn", "grade:grade"), ("preparer", "prepare:prepare")):
        reference = str(_get(config, key) or default)
        try:
            module = mlebench_compat.split_reference(reference)[0]
        except ValueError as err:
            raise CompetitionError(f"competition '{cid}': config.yaml key '{key}': {err}") from None
        leaf = module.rpartition(".")[2] + ".py"
        if (
            module.startswith(("mlebench.competitions.", "practicum.tasks.competitions."))
            or "." not in module
        ):
            if not (folder / leaf).is_file():
                raise CompetitionError(f"competition '{cid}' is missing {leaf} {where}")
    try:
        section = PracticumSection.model_validate(config.get("practicum") or {})
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise CompetitionError(
            f"competition '{cid}': config.yaml key 'practicum.{loc}': {first['msg']}"
        ) from None
    description_name = Path(str(config.get("description") or "description.md")).name
    description_path = folder / description_name
    if not description_path.is_file():
        description_path = folder / "description.md"
    if not description_path.is_file():
        raise CompetitionError(f"competition '{cid}' is missing {description_name} {where}")
    leaderboard = read_leaderboard(folder / "leaderboard.csv", cid)
    metric = section.metric or str(_get(config, "grader.name"))
    lower = _direction(cid, metric, section, leaderboard)
    if leaderboard and len(set(leaderboard)) > 1 and (leaderboard[0] < leaderboard[-1]) != lower:
        raise CompetitionError(
            f"competition '{cid}': leaderboard.csv must list the best score first, but "
            f"{metric} is {'lower' if lower else 'higher'}-is-better and it starts at "
            f"{leaderboard[0]} and ends at {leaderboard[-1]}"
        )
    return Competition(
        id=cid,
        name=str(config["name"]),
        root=folder,
        metric=metric,
        lower_is_better=lower,
        config=config,
        description=description_path.read_text(),
        leaderboard=leaderboard,
        practicum=section,
    )


def read_leaderboard(path: Path, cid: str) -> list[float] | None:
    """Scores of leaderboard.csv in file order (best first); None when there is no file."""
    if not path.is_file():
        return None
    head = path.read_text()[:200]
    if head.startswith("version https://git-lfs"):
        raise CompetitionError(
            f"competition '{cid}': {path} is a Git LFS pointer, not the leaderboard: "
            f"fetch it (git lfs pull) or delete it"
        )
    try:
        table = pd.read_csv(path)
    except Exception as err:
        raise CompetitionError(f"competition '{cid}': cannot read {path}: {err}") from None
    if "score" not in table.columns:
        raise CompetitionError(f"competition '{cid}': {path} has no 'score' column")
    scores = pd.to_numeric(table["score"], errors="coerce").dropna()
    if scores.empty:
        raise CompetitionError(f"competition '{cid}': {path} holds no numeric scores")
    return [float(s) for s in scores]


def _direction(
    cid: str, metric: str, section: PracticumSection, leaderboard: list[float] | None
) -> bool:
    if section.direction is not None:
        return section.direction == "lower"
    if leaderboard and len(set(leaderboard)) > 1:
        return leaderboard[0] < leaderboard[-1]
    known = grading.metric_lower_is_better(metric)
    if known is None:
        raise CompetitionError(
            f"competition '{cid}': cannot tell whether lower {metric} is better: set "
            f"'practicum: {{direction: lower}}' (or higher) in config.yaml"
        )
    return known


def _read_yaml(path: Path, cid: str) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise CompetitionError(
            f"competition '{cid}': {path.name} is not valid YAML{at}: {problem} ({path})"
        ) from None


def _get(config: dict, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


# -----------------------------------------------------------------------------------------------
# Registry: bundled competitions, user folders, $PRACTICUM_COMPETITIONS.


def bundled_dir() -> Path:
    """The folder of competitions shipped with practicum."""
    from practicum.tasks import competitions

    return Path(competitions.__file__).parent


def search_roots(extra_dirs: Sequence[Path] = ()) -> list[Path]:
    """Where competitions are looked for, first match winning: extra_dirs, then each folder of
    $PRACTICUM_COMPETITIONS (os.pathsep-separated), then the bundled suite."""
    env = [Path(p) for p in os.environ.get("PRACTICUM_COMPETITIONS", "").split(os.pathsep) if p]
    return [Path(d) for d in extra_dirs] + env + [bundled_dir()]


_FOLDER_SIGNS = ("config.yaml", "grade.py", "prepare.py", "description.md")


def competition_folders(root: Path) -> list[Path]:
    """Competition folders in `root` (or `root` itself if it is one), sorted by name."""
    root = Path(root)
    if (root / "config.yaml").is_file():
        return [root]
    if not root.is_dir():
        raise CompetitionError(f"competitions folder {root} does not exist")
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir()
        and not p.name.startswith(("_", "."))
        and any((p / sign).is_file() for sign in _FOLDER_SIGNS)
    )


def discover(extra_dirs: Sequence[Path] = ()) -> dict[str, Path]:
    """Competition id (folder name) -> folder, earlier search roots shadowing later ones."""
    found: dict[str, Path] = {}
    for root in search_roots(extra_dirs):
        for folder in competition_folders(root):
            found.setdefault(folder.name, folder)
    return found


def list_competitions(extra_dirs: Sequence[Path] = ()) -> list[Competition]:
    """Every competition: bundled, in extra_dirs and in $PRACTICUM_COMPETITIONS, sorted by id."""
    return [load_folder(folder) for _, folder in sorted(discover(extra_dirs).items())]


def load_competition(id_or_path: str | Path, extra_dirs: Sequence[Path] = ()) -> Competition:
    """A competition by id (searched as in `list_competitions`) or by folder path."""
    candidate = Path(id_or_path)
    if candidate.is_dir():
        return load_folder(candidate)
    folders = discover(extra_dirs)
    if str(id_or_path) not in folders:
        known = ", ".join(sorted(folders)) or "none"
        raise CompetitionError(f"unknown competition '{id_or_path}' (known: {known})")
    return load_folder(folders[str(id_or_path)])


# -----------------------------------------------------------------------------------------------
# Checksums.


def read_answers(path: Path) -> pd.DataFrame:
    """The private answers table (.csv, or .json/.jsonl as some MLE-bench competitions use)."""
    if not path.is_file():
        raise CompetitionError(f"answers file {path} does not exist: prepare the competition first")
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True)
    if path.suffix == ".json":
        return pd.read_json(path)
    return pd.read_csv(path)


def md5_file(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tree(folder: Path) -> dict:
    return {p.name: _tree(p) if p.is_dir() else md5_file(p) for p in sorted(folder.iterdir())}


def tree_checksums(public: Path, private: Path) -> dict:
    """{"public": {name: md5 or nested dict}, "private": {...}} (checksums.yaml's layout)."""
    return {"public": _tree(public), "private": _tree(private)}


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = str(value)
    return flat


def compare_checksums(expected: dict, actual: dict) -> list[str]:
    """Problems, one string per file: missing, or MD5 differs. Only public/private are checked
    (MLE-bench's checksums.yaml also has the raw zip's MD5, which we never see)."""
    want = _flatten({k: v for k, v in expected.items() if k in ("public", "private")})
    have = _flatten(actual)
    problems = []
    for name, md5 in sorted(want.items()):
        if name not in have:
            problems.append(f"{name} was not produced")
        elif have[name] != md5:
            problems.append(f"{name} has MD5 {have[name]}, expected {md5}")
    return problems


def _move_into_place(staging: Path, prepared: Path) -> None:
    try:
        os.rename(staging, prepared)
    except OSError:
        if (prepared / MARKER).is_file():
            return  # a concurrent prepare() finished first; its files are identical
        shutil.rmtree(prepared, ignore_errors=True)  # leftovers of an interrupted run
        os.rename(staging, prepared)
