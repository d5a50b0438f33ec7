"""Finding competitions: the bundled suite, user folders and $PRACTICUM_COMPETITIONS, by id."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from practicum.envs.mle.competition import Competition
from practicum.envs.mle.competition_config import CompetitionError
from practicum.envs.mle.competition_folder import load_folder


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
