"""Finding competitions and loading one folder into a `Competition`, checking everything it needs.

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

Competitions are looked up by id in `search_roots`: folders given by the caller, then
$PRACTICUM_COMPETITIONS, then the bundled suite (`practicum.tasks.competitions`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from practicum.envs.mle.competitions import mlebench_compat, secret_transform
from practicum.envs.mle.competitions.competition import Competition
from practicum.envs.mle.competitions.config import (
    CompetitionError,
    PracticumSection,
    config_value,
    read_yaml,
)
from practicum.envs.mle.competitions.metrics import metric_lower_is_better

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
    config = read_yaml(config_path, folder.name)
    if not isinstance(config, dict):
        raise CompetitionError(
            f"competition '{folder.name}': config.yaml must be a mapping of keys, "
            f"got {type(config).__name__} ({config_path})"
        )
    for key in REQUIRED_KEYS:
        if config_value(config, key) in (None, ""):
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
        reference = str(config_value(config, key) or default)
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
    metric = section.metric or str(config_value(config, "grader.name"))
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
        description=description_path.read_text().rstrip()
        + (
            secret_transform.note((section.task or "").lower() in secret_transform.LABEL_TASKS)
            if section.secret_transform
            else ""
        )
        + "\n",
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
    known = metric_lower_is_better(metric)
    if known is None:
        raise CompetitionError(
            f"competition '{cid}': cannot tell whether lower {metric} is better: set "
            f"'practicum: {{direction: lower}}' (or higher) in config.yaml"
        )
    return known


# -- finding competitions -------------------------------------------------------------------


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
