"""Share of a California school district's students above the national math median, from
district demographics and spending (statsmodels `star98`, 303 rows)."""

from pathlib import Path

from statsmodels.datasets import star98

from practicum.tasks.competitions._common import snake_case, write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = star98.load_pandas().data.copy()
    above, below = frame.pop("NABOVE"), frame.pop("NBELOW")
    frame = frame.rename(columns=snake_case)
    frame["pass_rate"] = (above / (above + below)).round(6)
    write_split(
        frame,
        public,
        private,
        targets=["pass_rate"],
        test_size=0.3,
        seed=0,
        sample=lambda train: {"pass_rate": round(float(train["pass_rate"].median()), 4)},
    )
