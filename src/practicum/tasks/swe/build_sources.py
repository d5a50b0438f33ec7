"""Rebuild the bundled source archives from the packages' sdists (a maintenance script).

    pip download --no-deps --no-binary :all: inflection==0.5.1 toolz==1.2.0 semver==3.1.1 \\
        parse==1.22.4 boltons==26.2.0 -d SDISTS
    python -m practicum.tasks.swe.build_sources SDISTS

Each archive keeps the package's code, its tests and its licence (no docs, no packaging
files), laid out so that the repository root on sys.path imports the package; pytest
configuration that needs plugins (coverage, doctest globs) is replaced by `test_args`.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

from practicum.tasks.swe import HERE

PACKAGES = {
    "inflection": {
        "version": "0.5.1",
        "module": "inflection",
        "license": "MIT",
        "keep": {
            "inflection/": "inflection/",
            "test_inflection.py": "test_inflection.py",
            "LICENSE": "LICENSE",
        },
    },
    "toolz": {
        "version": "1.2.0",
        "module": "toolz",
        "license": "BSD-3-Clause",
        "keep": {"toolz/": "toolz/", "tlz/": "tlz/", "LICENSE.txt": "LICENSE.txt"},
    },
    "semver": {
        "version": "3.1.1",
        "module": "semver",
        "license": "BSD-3-Clause",
        "keep": {"src/semver/": "semver/", "tests/": "tests/", "LICENSE.txt": "LICENSE.txt"},
        "files": {"pytest.ini": "[pytest]\npythonpath = tests\n"},
    },
    "parse": {
        "version": "1.22.4",
        "module": "parse",
        "license": "MIT",
        "keep": {"parse/": "parse/", "tests/": "tests/", "LICENSE": "LICENSE"},
    },
    "boltons": {
        "version": "26.2.0",
        "module": "boltons",
        "license": "BSD-3-Clause",
        "keep": {"boltons/": "boltons/", "tests/": "tests/", "LICENSE": "LICENSE"},
    },
}
SKIP = ("__pycache__", ".pyc", ".coveragerc", ".egg-info")


def build(sdists: Path, out: Path = HERE) -> dict[str, dict]:
    (out / "sources").mkdir(parents=True, exist_ok=True)
    records = {}
    for name, spec in PACKAGES.items():
        sdist = sdists / f"{name}-{spec['version']}.tar.gz"
        archive = f"sources/{name}-{spec['version']}.tar.gz"
        with tarfile.open(sdist) as src, tarfile.open(out / archive, "w:gz") as dst:
            prefix = f"{name}-{spec['version']}/"
            for member in sorted(src.getmembers(), key=lambda m: m.name):
                if not member.isfile() or any(s in member.name for s in SKIP):
                    continue
                rel = member.name.removeprefix(prefix)
                for frm, to in spec["keep"].items():
                    if rel == frm or (frm.endswith("/") and rel.startswith(frm)):
                        data = src.extractfile(member).read()
                        _add(dst, to + rel[len(frm) :] if frm.endswith("/") else to, data)
            for path, text in spec.get("files", {}).items():
                _add(dst, path, text.encode())
        records[name] = {
            "version": spec["version"],
            "module": spec["module"],
            "license": spec["license"],
            "archive": archive,
            "test_args": spec.get("test_args", []),
        }
    (out / "packages.json").write_text(json.dumps(records, indent=1) + "\n")
    return records


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1])), indent=1))
