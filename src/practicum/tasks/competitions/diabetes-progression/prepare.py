"""Disease progression one year after baseline from ten measurements (`load_diabetes`, 442 rows)."""

from pathlib import Path

from sklearn.datasets import load_diabetes

from practicum.tasks.competitions._common import write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    data = load_diabetes(as_frame=True, scaled=False)
    frame = data.data.copy()
    frame["progression"] = data.target
    write_split(
        frame,
        public,
        private,
        targets=["progression"],
        test_size=0.25,
        seed=0,
        sample=lambda train: {"progression": round(float(train["progression"].mean()), 1)},
    )
