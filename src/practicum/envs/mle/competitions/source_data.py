"""Host copies of the bundled competitions' source data, which the sandbox must not show.

The bundled competitions are cut from datasets that ship inside installed packages
(scikit-learn's `sklearn/datasets/data`, statsmodels' `statsmodels/datasets/*`, the standard
library's `pydoc_data`) and from a few test-data copies of the same tables (scipy's and
statsmodels' iris). A script that loads them could look up the test rows' answers, so MLE runs
hide these paths (`episode_data.CompetitionData.hidden`): folders of pure data are covered
whole, statsmodels' dataset folders file by file (their `__init__.py` / `data.py` modules stay
importable, since `statsmodels.api` imports them). The machine's re-encoding key
(`secret_transform.secret_file`) and the bundled competitions' own folder are hidden too.

Hiding is the first layer only: copies elsewhere (another package, a pip cache) are made
useless by the secret re-encoding of the split (`secret_transform`).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from practicum.envs.mle.competitions import secret_transform

DATA_FOLDERS = {
    "sklearn": ("datasets/data", "datasets/tests/data", "datasets/descr"),
    "scipy": ("spatial/tests/data", "io/arff/tests/data"),
    "statsmodels": ("genmod/tests/results",),
    "pydoc_data": (".",),
}
"""package -> folders (relative to the package) holding only data: hidden whole."""
STATSMODELS_DATASETS = "datasets"
"""statsmodels' dataset packages: each one's data files and `src` folder are hidden."""


def _package_dir(name: str) -> Path | None:
    """The folder of top-level package `name` without importing it; None if not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def hidden_source_paths() -> tuple[Path, ...]:
    """Existing host paths to hide from every MLE run (module docstring)."""
    found: list[Path] = []
    for package, folders in DATA_FOLDERS.items():
        root = _package_dir(package)
        if root is None:
            continue
        found += [(root / folder).resolve() for folder in folders if (root / folder).is_dir()]
    statsmodels = _package_dir("statsmodels")
    if statsmodels is not None and (statsmodels / STATSMODELS_DATASETS).is_dir():
        for dataset in sorted((statsmodels / STATSMODELS_DATASETS).iterdir()):
            if not dataset.is_dir() or dataset.name in ("__pycache__", "tests"):
                continue
            for entry in sorted(dataset.iterdir()):
                if entry.name == "src" or entry.is_file() and entry.suffix not in (".py", ".pyc"):
                    found.append(entry.resolve())
    bundled = _package_dir("practicum")
    if bundled is not None and (bundled / "tasks" / "competitions").is_dir():
        found.append((bundled / "tasks" / "competitions").resolve())
    return tuple(found)


def hidden_paths() -> tuple[Path, ...]:
    """`hidden_source_paths()` plus the re-encoding key file when it exists."""
    key = secret_transform.secret_file()
    return hidden_source_paths() + ((key,) if key.exists() else ())
