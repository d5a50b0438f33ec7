"""Helpers shared by the MLE environment tests."""

import subprocess
import sys
import textwrap

import pytest

_RUNNER = textwrap.dedent("""\
    import os, runpy, sys, traceback
    for folder in sys.argv[1:]:
        os.chdir(folder)
        print("=== RUN", flush=True)
        try:
            runpy.run_path("main.py", run_name="__main__")
            print("=== OK", flush=True)
        except BaseException:
            traceback.print_exc(file=sys.stdout)
            print("=== FAILED", flush=True)
    """)


def _run_scripts(folders) -> dict:
    """Run each folder's main.py (cwd = folder) in ONE fresh interpreter: imports load once.

    Returns folder -> (ok, stdout of that script without the runner's markers).
    """
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    parts = proc.stdout.split("=== RUN\n")[1:]
    assert len(parts) == len(folders), proc.stderr
    return {
        f: (p.rstrip().endswith("=== OK"), p.rsplit("=== ", 1)[0]) for f, p in zip(folders, parts)
    }


@pytest.fixture(scope="session")
def run_scripts():
    """The `_run_scripts` helper: folders -> {folder: (ok, stdout)}."""
    return _run_scripts


@pytest.fixture(scope="session")
def bundled_root(tmp_path_factory):
    """One data root for the bundled competitions, prepared (re-encoded) once per session:
    competition id -> PreparedPaths, prepared on first use."""
    from practicum.envs.mle.competitions.loading import load_competition

    root = tmp_path_factory.mktemp("mle-bundled")
    cache: dict = {}

    def prepared(cid: str):
        if cid not in cache:
            comp = load_competition(cid)
            cache[cid] = (comp, comp.prepare(root))
        return cache[cid]

    prepared.root = root
    return prepared
