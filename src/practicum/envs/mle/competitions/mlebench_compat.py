"""Run competition folders copied from MLE-bench (openai/mle-bench) with or without `mlebench`.

MLE-bench's grade.py files import `mlebench.grade_helpers.InvalidSubmissionError` and helpers
from `mlebench.competitions.utils`; its prepare.py files import `mlebench.utils.read_csv`; its
config.yaml names `mlebench.competitions.<id>.grade:grade`. When the real package is not
importable, `ensure_mlebench()` puts a small stand-in module tree into `sys.modules`, written
here from the documented behaviour (same names and keyword arguments, our own code).

`load_callable(folder, "mlebench.competitions.<id>.grade:grade")` always loads grade.py from the
competition folder by file path, as a submodule of a private package for that folder, so a
relative import such as `from .classes import CLASSES` works too.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import sys
import threading
import types
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from practicum.envs.mle.competitions.metrics import rmsle
from practicum.envs.mle.competitions.submission_checks import (
    InvalidSubmissionError,
    align_submission,
    check_probabilities,
    numeric_values,
)

SHIM_MARKER = "__practicum_shim__"
"""Attribute set to True on every stand-in module (so tests and users can tell them apart)."""


# ---------------------------------------------------------------------------------------------
# Helpers with MLE-bench's names and keyword arguments.


def prepare_for_accuracy_metric(
    submission: pd.DataFrame, answers: pd.DataFrame, target_column: str, id_column: str
) -> dict:
    """Inputs for sklearn's accuracy_score: {"y_true", "y_pred"} aligned by id."""
    sub, ans = align_submission(submission, answers, id_column, [target_column])
    return {"y_true": ans[target_column].to_numpy(), "y_pred": sub[target_column].to_numpy()}


def prepare_for_auroc_metric(
    submission: pd.DataFrame, answers: pd.DataFrame, id_col: str, target_col: str
) -> dict:
    """Inputs for sklearn's roc_auc_score: {"y_true", "y_score"}; scores must be probabilities."""
    sub, ans = align_submission(submission, answers, id_col, [target_col])
    score = numeric_values(sub, [target_col], id_col)
    check_probabilities(score, [target_col], lines=sub.attrs["lines"])
    return {"y_true": ans[target_col].to_numpy(), "y_score": score[:, 0]}


def prepare_for_rmsle_metric(
    submission: pd.DataFrame, answers: pd.DataFrame, target_column: str, id_column: str
) -> dict:
    """Inputs for an RMSLE: {"y_true", "y_pred"} as floats; negative predictions are invalid."""
    sub, ans = align_submission(submission, answers, id_column, [target_column])
    y_pred = numeric_values(sub, [target_column], id_column)[:, 0]
    if (y_pred < 0).any():
        raise InvalidSubmissionError(f"submission column '{target_column}' must be >= 0 for RMSLE")
    return {"y_true": ans[target_column].to_numpy(dtype=float), "y_pred": y_pred}


def df_to_one_hot(
    df: pd.DataFrame, id_column: str, target_column: str, classes: list[str]
) -> pd.DataFrame:
    """A table [id, *classes] with 1 in each row's class column and 0 elsewhere."""
    out = pd.DataFrame(0, index=df.index, columns=classes)
    for position, label in enumerate(df[target_column]):
        out.iloc[position, classes.index(label)] = 1
    out.insert(0, id_column, df[id_column].to_numpy())
    return out


def is_one_hot_encoded(xs: np.ndarray) -> bool:
    """True when a 2-D array holds only 0/1 and every row sums to 1."""
    xs = np.asarray(xs, dtype=float)
    return bool(np.isin(xs, (0.0, 1.0)).all() and np.allclose(xs.sum(axis=-1), 1))


def one_hot_dfs_to_log_loss_inputs(
    submission_one_hot: pd.DataFrame,
    answers_one_hot: pd.DataFrame,
    id_column: str = "id",
    apply_softmax: bool = True,
) -> dict:
    """Inputs for sklearn's log_loss from two one-column-per-class tables aligned by id.

    With apply_softmax the submission's rows go through a softmax unless already one-hot.
    """
    classes = [c for c in answers_one_hot.columns if c != id_column]
    sub, ans = align_submission(submission_one_hot, answers_one_hot, id_column, classes)
    y_pred = numeric_values(sub, classes, id_column)
    if apply_softmax and not is_one_hot_encoded(y_pred):
        shifted = np.exp(y_pred - y_pred.max(axis=1, keepdims=True))
        y_pred = shifted / shifted.sum(axis=1, keepdims=True)
    return {"y_true": ans[classes].to_numpy(dtype=float), "y_pred": y_pred}


def read_csv(path: str | Path, *args, **kwargs) -> pd.DataFrame:
    """`pandas.read_csv` (MLE-bench's wrapper only adds defaults we do not need)."""
    return pd.read_csv(path, *args, **kwargs)


def extract(compressed: str | Path, dst: str | Path, recursive: bool = False) -> None:
    """Unzip an archive into dst (MLE-bench prepare scripts call this on raw downloads)."""
    with zipfile.ZipFile(compressed) as archive:
        archive.extractall(dst)
    if recursive:
        for inner in Path(dst).rglob("*.zip"):
            extract(inner, inner.parent, recursive=True)


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)


# ---------------------------------------------------------------------------------------------
# The stand-in module tree.

_UTILS_EXPORTS = (
    prepare_for_accuracy_metric,
    prepare_for_auroc_metric,
    prepare_for_rmsle_metric,
    df_to_one_hot,
    is_one_hot_encoded,
    one_hot_dfs_to_log_loss_inputs,
    rmsle,
    get_logger,  # MLE-bench's utils module re-exports it; some prepare.py files import it there
)


def mlebench_installed() -> bool:
    """True when the real `mlebench` package (not our stand-in) can be imported."""
    module = sys.modules.get("mlebench")
    if module is not None:
        return not getattr(module, SHIM_MARKER, False)
    return importlib.util.find_spec("mlebench") is not None


def _module(name: str, package: bool = False, **attrs) -> types.ModuleType:
    module = types.ModuleType(name, f"practicum stand-in for {name} (mlebench is not installed)")
    setattr(module, SHIM_MARKER, True)
    if package:
        module.__path__ = []
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def install_shim() -> None:
    """Put the stand-in `mlebench` modules into sys.modules (replacing any earlier stand-in)."""
    utils = {f.__name__: f for f in (read_csv, extract, get_logger)}
    tree = {
        "mlebench": _module("mlebench", package=True),
        "mlebench.grade_helpers": _module(
            "mlebench.grade_helpers", InvalidSubmissionError=InvalidSubmissionError
        ),
        "mlebench.utils": _module("mlebench.utils", **utils),
        "mlebench.competitions": _module("mlebench.competitions", package=True),
        "mlebench.competitions.utils": _module(
            "mlebench.competitions.utils", **{f.__name__: f for f in _UTILS_EXPORTS}
        ),
    }
    for name, module in tree.items():
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(tree[parent], child, module)


def ensure_mlebench() -> None:
    """Make `import mlebench...` work: the real package if installed, else the stand-in."""
    if not mlebench_installed() and "mlebench" not in sys.modules:
        install_shim()


def invalid_submission_errors() -> tuple[type[BaseException], ...]:
    """Exception types meaning "bad submission": ours, plus the real mlebench's when loaded."""
    types_: list[type[BaseException]] = [InvalidSubmissionError]
    helpers = sys.modules.get("mlebench.grade_helpers")
    theirs = getattr(helpers, "InvalidSubmissionError", None)
    if isinstance(theirs, type) and theirs is not InvalidSubmissionError:
        types_.append(theirs)
    return tuple(types_)


# ---------------------------------------------------------------------------------------------
# Resolving "module.path:function" inside a competition folder.


def folder_package(folder: Path) -> str:
    """Name of the private package that holds a competition folder's modules."""
    folder = folder.resolve()
    digest = hashlib.md5(str(folder).encode()).hexdigest()[:10]
    slug = "".join(ch if ch.isalnum() else "_" for ch in folder.name)
    name = f"_practicum_competition_{slug}_{digest}"
    if name not in sys.modules:
        package = types.ModuleType(name, f"competition folder {folder}")
        package.__path__ = [str(folder)]
        package.__package__ = name
        sys.modules[name] = package
    return name


def split_reference(reference: str) -> tuple[str, str]:
    """ "a.b.grade:grade" -> ("a.b.grade", "grade"); raises ValueError without one colon."""
    module, sep, attr = reference.partition(":")
    if not sep or not module or not attr or ":" in attr:
        raise ValueError(f"expected 'module:function', got {reference!r}")
    return module, attr


def load_callable(folder: Path, reference: str) -> Callable:
    """The function named by `reference`, loading `<folder>/<last module part>.py` by path.

    MLE-bench's `mlebench.competitions.<id>.grade:grade` and our `grade:grade` both resolve to
    the folder's grade.py. A module not found in the folder is imported normally (for example
    `practicum.envs.mle.competitions.metrics:...`). Import errors propagate to the caller.
    """
    module_name, attr = split_reference(reference)
    leaf = module_name.rpartition(".")[2]
    path = folder / f"{leaf}.py"
    ensure_mlebench()
    with _LOAD_LOCK:  # threads grading at once must not see a half-executed module
        module = _load_module(folder, module_name, leaf, path)
    if not hasattr(module, attr):
        raise AttributeError(f"{path if path.is_file() else module_name} defines no {attr!r}")
    return getattr(module, attr)


_LOAD_LOCK = threading.RLock()


def _load_module(folder: Path, module_name: str, leaf: str, path: Path):
    if path.is_file():
        package = folder_package(folder)
        qualified = f"{package}.{leaf}"
        module = sys.modules.get(qualified)
        if module is None or getattr(module, "__file__", None) != str(path):
            spec = importlib.util.spec_from_file_location(qualified, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[qualified] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(qualified, None)
                raise
    else:
        module = importlib.import_module(module_name)
    return module


def forget_folder(folder: Path) -> None:
    """Drop a folder's cached modules (so an edited grade.py is re-read)."""
    package = folder_package(folder)
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


__all__ = [
    "SHIM_MARKER",
    "ensure_mlebench",
    "install_shim",
    "mlebench_installed",
    "invalid_submission_errors",
    "load_callable",
    "forget_folder",
    "split_reference",
    *(f.__name__ for f in _UTILS_EXPORTS),
    "read_csv",
    "extract",
]
