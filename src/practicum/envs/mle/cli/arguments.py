"""Arguments several `mle` commands share: where the data and the raw files are, and which
folders hold competitions."""

from __future__ import annotations

import argparse
from pathlib import Path

RAW_HELP = (
    "folder with the competition's raw files (default: <data>/<id>/raw). Only competitions "
    "prepared from downloaded files (e.g. copied from MLE-bench) need it; the bundled ones "
    "build their data from installed packages and ignore it."
)


DATA_HELP = (
    "data folder, as $PRACTICUM_DATA: files go to DIR/mle/<id>/prepared/ (default: "
    "$PRACTICUM_DATA/mle or ~/.cache/practicum/mle)"
)


def mle_data_root(data: Path | None) -> Path | None:
    """`--data DIR` means what PRACTICUM_DATA=DIR means: the MLE data root is DIR/mle."""
    return Path(data) / "mle" if data is not None else None


def competitions_option() -> argparse.ArgumentParser:
    """A parent parser holding the repeatable `--competitions DIR` option."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--competitions",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a folder of competition folders (or one competition folder) searched before "
        "$PRACTICUM_COMPETITIONS and the bundled suite; repeatable",
    )
    return parent
