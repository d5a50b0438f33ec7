"""Malignant or benign breast mass from 30 cell-nucleus features (`load_breast_cancer`,
569 rows)."""

from pathlib import Path

from sklearn.datasets import load_breast_cancer

from practicum.tasks.competitions._common import snake_case, write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    data = load_breast_cancer(as_frame=True)
    frame = data.data.rename(columns=snake_case)
    frame["malignant"] = 1 - data.target  # scikit-learn codes malignant as 0
    write_split(
        frame,
        public,
        private,
        targets=["malignant"],
        test_size=0.3,
        seed=0,
        stratify="malignant",
        sample=lambda train: {"malignant": round(float(train["malignant"].mean()), 4)},
    )
