"""Handwritten digits 0-9 as 8x8 grey-level images (`load_digits`, 1797 rows, 64 pixel columns)."""

from pathlib import Path

from sklearn.datasets import load_digits

from practicum.tasks.competitions._common import write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    data = load_digits(as_frame=True)
    frame = data.data.astype(int)
    frame["digit"] = data.target
    write_split(
        frame,
        public,
        private,
        targets=["digit"],
        test_size=0.25,
        seed=0,
        stratify="digit",
        sample=lambda train: {"digit": int(train["digit"].mode()[0])},
    )
