"""Grade a patch the SWE-bench way (FULL rule): resolved only if every listed test passes.

    verdict = grade(instance, agent_diff)
    verdict.resolved, verdict.fail_to_pass, verdict.reason

Steps: keep only the diff's source-file blocks (`diffs.source_only`: edits to tests, conftest,
pytest config, start-up files, compiled files and anything in `instance.test_files` are
dropped, which restores the task's own tests); materialize a fresh base copy; `git apply` the
rest inside the sandbox; run the files holding FAIL_TO_PASS + PASS_TO_PASS; resolved = every
id of both lists reported once as passed (SWE-bench's `RESOLVED_FULL`) and no protected file
appeared or changed while the tests ran (code under test rewriting a test file pytest has not
collected yet, or dropping a conftest.py into a folder it has not entered yet). A patch that
does not apply is unresolved with a reason. The suite folder and the source archive are hidden
from the sandbox (`repo.secret_paths`); the graded tree has no git history.

Residual weakness (documented, not closable at this level): the agent's source code is
imported by the tests, so it runs inside the pytest process and can rewrite pytest's own
reports (monkeypatch `_pytest` internals, as the red-team test pins and `practicum audit`
reports as a known hole; or print forged statuses from a thread right after the runner's end
marker, whose nonce it could read from the runner's frame). A patched terminal reporter no
longer forges the summary: statuses are recorded by the runner's plugin and printed after the
marker (testing.RUNNER). Every way that stays *outside* that process is contained: editing tests,
a conftest.py, pytest config or addopts, a fake `pytest.py` / `sitecustomize.py`, printed fake
PASSED lines and summaries (at import, in test output, from atexit hooks, from background
processes), leftover processes, reading the gold patch or the mutation record; see
tests/envs/swe/test_grading_redteam.py. Closing the residual needs the tests to run in a
process that never imports the agent's code as trusted, e.g. comparing against an outside
oracle, which SWE-bench does not do either.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from practicum.envs.sandbox import Limits, read_workdir_file
from practicum.envs.swe.diffs import is_protected, source_only
from practicum.envs.swe.instance import SweInstance
from practicum.envs.swe.repo import RepoError, apply_patch, materialize, scratch_dir, secret_paths
from practicum.envs.swe.testing import TEST_LIMITS, TestRun, run_tests

LOG_TAIL = 4000


@dataclass(frozen=True)
class Verdict:
    """The outcome of grading one patch on one instance."""

    instance_id: str
    resolved: bool
    patch_applied: bool
    fail_to_pass: tuple[int, int]
    """(passed, listed) FAIL_TO_PASS tests."""
    pass_to_pass: tuple[int, int]
    """(passed, listed) PASS_TO_PASS tests."""
    reason: str
    """'resolved', or why not (patch does not apply, tests failed, timeout, ...)."""
    dropped_files: tuple[str, ...]
    """Paths whose edits were discarded (tests, conftest, pytest config)."""
    log_tail: str
    seconds: float
    timed_out: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def grade(
    instance: SweInstance, patch: str, *, limits: Limits | None = None, keep_dir: Path | None = None
) -> Verdict:
    """Grade `patch` (a unified diff against the base state) on `instance`.

    `keep_dir`, when given, receives the graded tree (for debugging); otherwise it is removed.
    """
    start = time.monotonic()
    kept, dropped = source_only(patch, instance.test_files)
    f2p, p2p = instance.FAIL_TO_PASS, instance.PASS_TO_PASS
    zero = ((0, len(f2p)), (0, len(p2p)))

    def verdict(resolved, applied, counts, reason, log="", timed_out=False) -> Verdict:
        return Verdict(
            instance.instance_id,
            resolved,
            applied,
            counts[0],
            counts[1],
            reason,
            tuple(dropped),
            log[-LOG_TAIL:],
            round(time.monotonic() - start, 3),
            timed_out,
        )

    scratch = scratch_dir("practicum-swe-grade-")
    repo = scratch / "repo"
    hidden = secret_paths(instance, repo)
    try:
        try:
            materialize(instance, repo)
        except RepoError as err:
            return verdict(False, False, zero, f"base state cannot be built: {err}")
        applied = apply_patch(repo, kept, hidden_paths=hidden)
        if not applied.ok:
            return verdict(False, False, zero, "patch does not apply", applied.output)
        before = protected_snapshot(repo, instance.test_files)
        run = run_tests(
            repo,
            [*f2p, *p2p],
            test_args=instance.test_args,
            limits=limits or TEST_LIMITS,
            hidden_paths=hidden,
        )
        resolved, counts = judge(run, f2p, p2p)
        changed = sorted(
            set(before.items()) ^ set(protected_snapshot(repo, instance.test_files).items())
        )
        if changed:
            paths = ", ".join(dict.fromkeys(p for p, _ in changed))
            return verdict(
                False,
                True,
                counts,
                f"test files changed during the run: {paths}",
                run.log,
                run.timed_out,
            )
        return verdict(
            resolved, True, counts, _reason(run, counts, resolved), run.log, run.timed_out
        )
    finally:
        if keep_dir is not None:
            shutil.copytree(repo, keep_dir, symlinks=True, dirs_exist_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)


def protected_snapshot(repo: Path, test_files=()) -> dict[str, str]:
    """Digest of every protected file (tests, conftest, pytest config) in the tree, walked
    without following symlinks and read with `read_workdir_file` (the tree is untrusted)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(repo, followlinks=False):
        rel_dir = Path(dirpath).relative_to(repo)
        for name in filenames + [d for d in dirnames if os.path.islink(Path(dirpath, d))]:
            rel = (rel_dir / name).as_posix()
            if not is_protected(rel, test_files, new_file=True):
                continue
            full = Path(dirpath, name)
            if os.path.islink(full):
                out[rel] = "link:" + os.readlink(full)
                continue
            try:
                data = read_workdir_file(repo, rel)
            except (OSError, ValueError) as err:
                out[rel] = f"unreadable:{type(err).__name__}"
                continue
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def judge(run: TestRun, f2p, p2p) -> tuple[bool, tuple[tuple[int, int], tuple[int, int]]]:
    """SWE-bench's FULL rule on one test run: (resolved, ((F2P passed, listed), (P2P passed,
    listed))); resolved needs every listed id passed, no timeout, and at least one listed id."""
    counts = ((run.count_passed(f2p), len(f2p)), (run.count_passed(p2p), len(p2p)))
    resolved = (
        not run.timed_out
        and counts[0][0] == len(f2p)
        and counts[1][0] == len(p2p)
        and len(f2p) + len(p2p) > 0
    )
    return resolved, counts


def _reason(run: TestRun, counts, resolved: bool) -> str:
    if resolved:
        return "resolved"
    if run.timed_out:
        return "tests timed out"
    if run.killed_reason:
        return f"test run killed ({run.killed_reason})"
    (f_ok, f_n), (p_ok, p_n) = counts
    parts = []
    if f_ok < f_n:
        parts.append(f"FAIL_TO_PASS {f_ok}/{f_n} pass")
    if p_ok < p_n:
        parts.append(f"PASS_TO_PASS {p_ok}/{p_n} pass")
    return "; ".join(parts) or "no tests listed"
