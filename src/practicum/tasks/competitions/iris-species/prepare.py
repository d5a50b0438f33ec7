"""Iris species from four flower measurements (scikit-learn's `load_iris`, 150 rows)."""

from pathlib import Path

from sklearn.datasets import load_iris

from practicum.tasks.competitions._common import write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    data = load_iris(as_frame=True)
    frame = data.data.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    frame["species"] = data.target.map(dict(enumerate(data.target_names)))
    write_split(
        frame,
        public,
        private,
        targets=["species"],
        test_size=0.3,
        seed=0,
        stratify="species",
        sample=lambda train: {"species": train["species"].mode()[0]},
    )
