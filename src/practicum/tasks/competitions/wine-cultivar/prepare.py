"""Which of three cultivars a wine comes from, by 13 chemical measurements (`load_wine`,
178 rows)."""

from pathlib import Path

from sklearn.datasets import load_wine

from practicum.tasks.competitions._common import snake_case, write_split

CLASSES = ["class_0", "class_1", "class_2"]


def prepare(raw: Path, public: Path, private: Path) -> None:
    data = load_wine(as_frame=True)
    frame = data.data.rename(columns=snake_case)
    frame["cultivar"] = data.target.map(lambda k: CLASSES[k])
    write_split(
        frame,
        public,
        private,
        targets=["cultivar"],
        test_size=0.3,
        seed=0,
        stratify="cultivar",
        sample=lambda train: {c: 1 / len(CLASSES) for c in CLASSES},
    )
