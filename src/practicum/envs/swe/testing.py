"""Run a repository's pytest tests in the sandbox and read one status per test id.

    run = run_tests(repo, ["test_x.py::test_a", "test_x.py::test_b[a b-c]"])
    run.passed("test_x.py::test_a"), run.timed_out, run.log

Tests run with plugin autoload off (`PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`), `-rA -p
no:cacheprovider`, the instance's `test_args`, and a wall limit. The interpreter runs isolated
(`python -I -B`: no bytecode caches are written): pytest is imported from the venv *before* the
repository is put first on sys.path, so a repository file named `pytest.py` or `sitecustomize.py`
cannot stand in for
them (the repository is otherwise importable exactly as with PYTHONPATH=repo).

Statuses come from a plugin of the runner that records every test report; the runner prints
them after the run's end marker (a random nonce it prints once pytest returns, then
`os._exit`), so lines printed by the code under test, a patched terminal reporter, atexit hooks
or leftover processes after the run do not count. They are matched against the exact test ids asked
for: ids with spaces or " - " inside brackets are safe, and an id reported more than once or not at
all does
not pass. As in SWE-bench, PASSED and XFAIL count as passed.
"""

from __future__ import annotations

import re
import secrets
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from practicum.envs.sandbox import Limits, run_command

STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
PASSING = ("PASSED", "XFAIL")
MISSING = "MISSING"
DUPLICATE = "DUPLICATE"

TEST_LIMITS = Limits(
    wall_seconds=120, memory_mb=2048, max_processes=64, output_bytes=16 * 2**20, file_size_mb=64
)
"""Default limits of one test run: large output (every test id is in the log)."""

RUNNER = """\
import os, sys
def _main():
    end = sys.stdin.readline().strip()
    import pytest
    lines = []
    class Record:  # statuses as -rA would list them, kept out of the code under test's output
        def pytest_collectreport(self, report):
            if report.failed:
                lines.append("ERROR " + report.nodeid)
        def pytest_runtest_logreport(self, report):
            xfail = hasattr(report, "wasxfail")
            if report.when == "call" and report.passed:
                lines.append(("XPASS " if xfail else "PASSED ") + report.nodeid)
            elif report.failed:
                lines.append(("FAILED " if report.when == "call" else "ERROR ") + report.nodeid)
            elif report.skipped:
                lines.append(("XFAIL " if xfail else "SKIPPED ") + report.nodeid)
    sys.path.insert(0, os.getcwd())
    code = int(pytest.main(sys.argv[1:], plugins=[Record()]))
    sys.stdout.flush()
    sys.stderr.flush()
    text = "\\n%s pytest exit %d\\n%s" % (end, code, "".join(
        "%s %s\\n" % (end, line) for line in lines))
    data = text.encode()
    while data:
        data = data[os.write(1, data):]
    os._exit(code)
_main()
"""
"""Reads the end marker from stdin, imports pytest from the venv, puts the repository first on
sys.path, runs pytest with a plugin that records every test's status, then prints the marker
and, after it, those statuses as a short test summary, and leaves with os._exit (no atexit hook
of the code under test runs after it). pytest's own summary is only for people: code under
test can rewrite it (a source file that patches the terminal reporter forged one, found by
`practicum audit`), while each recorded status is a line that starts with a marker it does not
know: a process the code left behind, writing a summary of its own to the real stdout while the
runner prints (the red-team test hands pytest's saved stdout down to one), adds nothing."""

PYTEST_ARGS = (
    "-rA",
    "-p",
    "no:cacheprovider",
    "--tb=short",
    "--color=no",
    "-o",
    "console_output_style=classic",
)

_SUMMARY = re.compile(r"^=+ short test summary info =+\s*$")


@dataclass(frozen=True)
class TestRun:
    """One sandboxed pytest run: a status per asked test id and what happened."""

    __test__ = False  # not a pytest test class

    statuses: dict[str, str]
    """Test id -> PASSED / FAILED / ERROR / SKIPPED / XFAIL / XPASS / MISSING / DUPLICATE."""
    log: str
    returncode: int | None
    timed_out: bool
    seconds: float
    killed_reason: str | None = None
    reported: dict[str, str] = field(default_factory=dict, repr=False)
    """Every id the summary reported exactly once (with its status), asked for or not."""

    def passed(self, test_id: str) -> bool:
        return self.statuses.get(test_id) in PASSING

    def count_passed(self, ids: Iterable[str]) -> int:
        return sum(self.passed(t) for t in ids)


def after_marker(log: str, marker: str) -> str:
    """The runner's recorded statuses as a short test summary: the lines after the last
    `marker pytest exit` line that start with `marker` (each status is printed on one such
    line), the marker taken off; '' when the exit line is absent (pytest never returned, so
    nothing in the log can be trusted). Lines without the marker, interleaved by any other
    process writing to the same output, are not read."""
    cut = log.rfind("\n" + marker + " pytest exit ")
    if cut < 0:
        return ""
    prefix = marker + " "
    statuses = [
        line[len(prefix) :] for line in log[cut + 1 :].splitlines()[1:] if line.startswith(prefix)
    ]
    bar = "=" * 8
    return (
        f"{bar} short test summary info {bar}\n" + "".join(f"{x}\n" for x in statuses) + f"{bar}\n"
    )


def summary_lines(log: str) -> list[tuple[str, str]]:
    """(status, rest of line) of every line of the log's last short-test-summary section."""
    lines = log.splitlines()
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if _SUMMARY.match(lines[i]):
            start = i + 1
            break
    if start is None:
        return []
    out = []
    for line in lines[start:]:
        if line.startswith("="):
            break
        status, _, rest = line.partition(" ")
        if status in STATUSES:
            out.append((status, rest))
    return out


def statuses_for(log: str, ids: Iterable[str]) -> dict[str, str]:
    """Status of each id in `ids`: matched exactly (`id` or `id - message`) against the summary;
    MISSING when not reported, DUPLICATE when reported more than once."""
    wanted = list(dict.fromkeys(ids))
    hits: dict[str, list[str]] = {t: [] for t in wanted}
    lines = summary_lines(log)
    for status, rest in lines:
        if rest in hits:
            hits[rest].append(status)
            continue
        # FAILED/ERROR/XFAIL lines append " - message"; the id is a prefix ending there.
        for cut in _dash_positions(rest):
            head = rest[:cut]
            if head in hits:
                hits[head].append(status)
                break
    return {t: (MISSING if not h else h[0] if len(h) == 1 else DUPLICATE) for t, h in hits.items()}


def _dash_positions(rest: str) -> list[int]:
    return [m.start() for m in re.finditer(r" - ", rest)]


def reported_statuses(log: str) -> dict[str, str]:
    """Every id the summary reports exactly once, with its status (ids are read up to the first
    ' - ' outside brackets; PASSED lines carry the bare id)."""
    seen: Counter[str] = Counter()
    status_of: dict[str, str] = {}
    for status, rest in summary_lines(log):
        test_id = rest if status == "PASSED" else _split_id(rest)
        if "::" not in test_id:
            continue  # e.g. "SKIPPED [1] file.py:3: reason" or a collection error of a file
        seen[test_id] += 1
        status_of[test_id] = status
    return {t: s for t, s in status_of.items() if seen[t] == 1}


def _split_id(rest: str) -> str:
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and rest.startswith(" - ", i):
            return rest[:i]
    return rest


def test_files_of(ids: Iterable[str]) -> list[str]:
    """The distinct files (the part before '::') of test ids, in first-seen order."""
    return list(dict.fromkeys(t.split("::", 1)[0] for t in ids))


def run_tests(
    repo: Path,
    tests: Sequence[str],
    *,
    test_args: Sequence[str] = (),
    limits: Limits | None = None,
    hidden_paths: Sequence[Path] = (),
    select: str = "files",
) -> TestRun:
    """Run `tests` (test ids or files) in the sandbox with cwd = `repo`; statuses per id.

    select='files' runs the whole files the ids live in (robust to ids pytest cannot select
    back, e.g. with odd characters); select='ids' passes the ids themselves.
    """
    ids = [t for t in tests if "::" in t]
    targets = test_files_of(tests) if select == "files" else list(dict.fromkeys(tests))
    argv = ["python", "-I", "-B", "-c", RUNNER, *PYTEST_ARGS, *test_args, *targets]
    marker = "practicum-end-" + secrets.token_hex(16)
    result = run_command(
        argv,
        Path(repo),
        limits or TEST_LIMITS,
        hidden_paths=hidden_paths,
        stdin=marker + "\n",
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0", "COLUMNS": "240"},
    )
    trusted = after_marker(result.stdout, marker)
    log = result.stdout + ("\n" + result.stderr if result.stderr else "")
    return TestRun(
        statuses=statuses_for(trusted, ids),
        log=log,
        returncode=result.returncode,
        timed_out=result.timed_out,
        seconds=result.duration,
        killed_reason=result.killed_reason,
        reported=reported_statuses(trusted),
    )
