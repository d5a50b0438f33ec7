"""The bundled SWE task suite: trimmed source archives of five small pure-Python packages (their
code, tests and licence) and `instances.jsonl`, tasks synthesized from them by
`practicum swe synthesize` and validated by `practicum swe check`.

Suggested held-out package: `parse` (never train on it; report resolve rates on it).

How the suite was made (`yield.json` holds each package's yield):

    python -m practicum.tasks.swe.build_sources SDISTS      # trimmed archives -> sources/
    practicum swe synthesize inflection toolz semver parse --out A --max-tried 30 --max-kept 14
    practicum swe synthesize boltons --out B --max-tried 24 --max-kept 14
    practicum swe synthesize inflection --out C --max-tried 16 --max-kept 12 --per-function 3
    # instances.jsonl = A (without inflection) + B + C (same relative `sources/` archives)
    practicum swe check                                      # every gold resolves, empty none
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELD_OUT_PACKAGES = ("parse",)
"""Packages whose tasks are held out for evaluation (split by package, never by task)."""


def bundled_instances_path() -> Path:
    """The bundled suite's SWE-bench-format JSONL file."""
    return HERE / "instances.jsonl"


def bundled_packages() -> dict[str, dict]:
    """name -> package record (archive, module, test_args, version, licence) of the bundled
    source archives."""
    return json.loads((HERE / "packages.json").read_text())
