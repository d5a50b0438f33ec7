"""Whether a married woman reported any extramarital affair (statsmodels `fair`, 6366 rows).

Source: Fair (1978), "A Theory of Extramarital Affairs", 1974 Redbook magazine survey.
"""

from pathlib import Path

from statsmodels.datasets import fair

from practicum.tasks.competitions._common import write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = fair.load_pandas().data.copy()
    frame["affair"] = (frame.pop("affairs") > 0).astype(int)
    write_split(
        frame,
        public,
        private,
        targets=["affair"],
        test_size=0.2,
        seed=0,
        stratify="affair",
        sample=lambda train: {"affair": round(float(train["affair"].mean()), 4)},
    )
