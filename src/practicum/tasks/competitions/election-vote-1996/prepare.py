"""Clinton or Dole: a respondent's 1996 presidential vote from the American National Election
Study (statsmodels `anes96`, 944 rows)."""

from pathlib import Path

from statsmodels.datasets import anes96

from practicum.tasks.competitions._common import snake_case, write_split


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = anes96.load_pandas().data.drop(columns=["logpopul"]).rename(columns=snake_case)
    frame["vote"] = frame.pop("vote").map({0.0: "clinton", 1.0: "dole"})
    write_split(
        frame,
        public,
        private,
        targets=["vote"],
        test_size=0.3,
        seed=0,
        stratify="vote",
        sample=lambda train: {"vote": train["vote"].mode()[0]},
    )
