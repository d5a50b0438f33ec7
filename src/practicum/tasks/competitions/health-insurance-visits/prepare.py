"""Outpatient doctor visits per person-year in the RAND Health Insurance Experiment
(statsmodels `randhie`, 20190 rows)."""

from pathlib import Path

from statsmodels.datasets import randhie

from practicum.tasks.competitions._common import write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = randhie.load_pandas().data.copy()
    frame["visits"] = frame.pop("mdvis").astype(int)
    write_split(
        frame,
        public,
        private,
        targets=["visits"],
        test_size=0.2,
        seed=0,
        sample=lambda train: {"visits": float(train["visits"].median())},
    )
