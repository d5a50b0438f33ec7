"""The one step every bundled prepare.py shares: shuffle, number, split, write four files.

Files written (MLE-bench's layout, our names):
    public/train.csv              id, features, target column(s)
    public/test.csv               id, features
    public/sample_submission.csv  id, submission column(s) filled with a trivial guess
    private/answers.csv           id, target column(s)
Everything is seeded, so the same package data always gives byte-identical files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split


def write_split(
    frame: pd.DataFrame,
    public: Path,
    private: Path,
    *,
    targets: Sequence[str],
    sample: Callable[[pd.DataFrame], dict[str, Any]],
    test_size: float,
    seed: int = 0,
    stratify: str | None = None,
) -> None:
    """Shuffle `frame` (seeded), add an `id` column 0..N-1, split off `test_size`, write files.

    sample(train) -> {column: value} gives the sample submission's columns (a constant guess
    computed from the training part, e.g. the majority class or the mean).
    """
    targets = list(targets)
    shuffled = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    shuffled.insert(0, "id", np.arange(len(shuffled)))
    train, test = train_test_split(
        shuffled,
        test_size=test_size,
        random_state=seed,
        stratify=shuffled[stratify] if stratify else None,
    )
    train, test = train.sort_values("id"), test.sort_values("id")
    train.to_csv(public / "train.csv", index=False)
    test.drop(columns=targets).to_csv(public / "test.csv", index=False)
    test[["id", *targets]].to_csv(private / "answers.csv", index=False)
    submission = pd.DataFrame({"id": test["id"].to_numpy()})
    for column, value in sample(train).items():
        submission[column] = value
    submission.to_csv(public / "sample_submission.csv", index=False)
    assert len(train) + len(test) == len(frame) and set(targets) <= set(train.columns)


def snake_case(name: str) -> str:
    """ "mean radius" -> "mean_radius"; "TVnews" -> "tvnews"; "od280/od315" -> "od280_od315"."""
    return "_".join(name.lower().replace("-", " ").replace("/", " ").split())
