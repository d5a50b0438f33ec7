"""Which part of the Python documentation a paragraph comes from (text classification).

The paragraphs are a snapshot (source/paragraphs.csv) of Python 3.11's `pydoc_data.topics`,
the help texts behind `help("if")`, mapped to six chapters; build_suite.py regenerates it.
The snapshot, not the running Python's copy, is used so the data is the same on every version.
"""

from pathlib import Path

import pandas as pd

from practicum.tasks.competitions._common import write_split

SNAPSHOT = Path(__file__).parent / "source" / "paragraphs.csv"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = pd.read_csv(SNAPSHOT)[["text", "chapter"]]
    write_split(
        frame,
        public,
        private,
        targets=["chapter"],
        test_size=0.25,
        seed=0,
        stratify="chapter",
        sample=lambda train: {"chapter": train["chapter"].mode()[0]},
    )
