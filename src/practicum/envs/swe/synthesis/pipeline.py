"""Synthesize SWE tasks from a package's own test suite, SWE-smith style (arXiv 2504.21798).

For one package: run its tests once at the fixed state (the baseline), then try procedural
mutants of functions of some complexity (`mutators`), round-robin over mutator kinds. A mutant
is kept only if the mutated module still imports and at least one baseline-passing test now
fails (and not more than `max_fail_fraction` of them, which would be an import-level break):
FAIL_TO_PASS = the tests that now fail, PASS_TO_PASS = the baseline-passing rest, bug_patch =
the mutation, gold patch = its inverse. Every test run is sandboxed.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from practicum.envs.sandbox import Limits, run_command
from practicum.envs.swe.diffs import file_diff
from practicum.envs.swe.repo import copy_tree, extract_source
from practicum.envs.swe.synthesis import issues
from practicum.envs.swe.synthesis.mutators import MUTATORS, Function, candidates, mutate
from practicum.envs.swe.synthesis.packages import PackageSource, copy_archive, source_and_test_files
from practicum.envs.swe.testing import TEST_LIMITS, run_tests


@dataclass
class Yield:
    """What synthesis did for one package."""

    package: str
    baseline_passed: int = 0
    candidates: int = 0
    tried: int = 0
    kept: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    """Reason -> count: no_change, import_error, no_failure, too_many_failures, timeout."""
    by_mutator: dict[str, int] = field(default_factory=dict)
    """Kept mutants per mutator kind."""
    seconds: float = 0.0


@dataclass(frozen=True)
class Options:
    max_tried: int = 40
    """Mutants run through the tests per package, at most."""
    max_kept: int = 16
    """Stop a package after this many kept tasks."""
    per_function: int = 2
    """Kept tasks per function, at most (spreads tasks over the code)."""
    min_complexity: int = 3
    max_fail_fraction: float = 0.5
    seed: int = 0
    tiers: tuple[int, ...] = (1, 2, 3)
    """Tiers assigned round-robin to a package's kept tasks."""


def _module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _order(cands: list[tuple[str, Function, str, int]], seed: int):
    """Candidates shuffled, then interleaved round-robin over mutator kinds."""
    rng = random.Random(seed)
    by_kind: dict[str, list] = {m: [] for m in MUTATORS}
    for c in cands:
        by_kind[c[2]].append(c)
    for lst in by_kind.values():
        rng.shuffle(lst)
    kinds = [k for k in MUTATORS if by_kind[k]]
    rng.shuffle(kinds)
    while any(by_kind[k] for k in kinds):
        for k in kinds:
            if by_kind[k]:
                yield by_kind[k].pop()


def synthesize_package(
    pkg: PackageSource,
    out_dir: Path,
    scratch: Path,
    options: Options = Options(),
    *,
    on_step: Callable[[str], None] | None = None,
    complete: Callable[[list[dict]], str] | None = None,
) -> tuple[list[dict], Yield]:
    """(SWE-bench-format records, yield) of one package; the source archive is copied to
    out_dir/sources/ and records point at it relative to out_dir."""
    start = time.monotonic()
    stats = Yield(pkg.name)
    archive = copy_archive(pkg.archive, out_dir)
    fixed = scratch / f"{pkg.name}-fixed"
    extract_source(archive, fixed)
    sources, tests = source_and_test_files(fixed, pkg.module)

    base = _fresh(fixed, scratch / f"{pkg.name}-baseline")
    baseline = run_tests(base, tests, test_args=pkg.test_args)
    passed = sorted(t for t, s in baseline.reported.items() if s == "PASSED")
    stats.baseline_passed = len(passed)
    if not passed:
        raise RuntimeError(
            f"{pkg.name}: no test passes at the fixed state:\n{baseline.log[-2000:]}"
        )
    limits = Limits(
        wall_seconds=max(30.0, 4 * baseline.seconds + 15),
        memory_mb=TEST_LIMITS.memory_mb,
        max_processes=TEST_LIMITS.max_processes,
        output_bytes=TEST_LIMITS.output_bytes,
        file_size_mb=TEST_LIMITS.file_size_mb,
    )

    texts = {s: (fixed / s).read_text() for s in sources}
    cands = []
    for s in sources:
        try:
            cands.extend((s, fn, m, k) for fn, m, k in candidates(texts[s], options.min_complexity))
        except Exception:  # noqa: BLE001 - a file libcst cannot parse has no candidates
            continue
    stats.candidates = len(cands)
    records: list[dict] = []
    per_fn: Counter[str] = Counter()
    seen: set[str] = set()
    rejected: Counter[str] = Counter()
    for path, fn, kind, site in _order(cands, options.seed):
        if stats.tried >= options.max_tried or len(records) >= options.max_kept:
            break
        key = f"{path}:{fn.name}"
        if per_fn[key] >= options.per_function:
            continue
        new = mutate(texts[path], fn, kind, site)
        digest = new and hashlib.sha1(f"{path}\0{new}".encode()).hexdigest()
        if new is None or digest in seen:
            rejected["no_change"] += 1
            continue
        seen.add(digest)
        stats.tried += 1
        work = _fresh(fixed, scratch / f"{pkg.name}-m{stats.tried}")
        (work / path).write_text(new)
        verdict, run = _check(
            work,
            _module_name(path),
            tests,
            pkg.test_args,
            limits,
            passed,
            options.max_fail_fraction,
        )
        shutil.rmtree(work.parent, ignore_errors=True)
        if on_step:
            on_step(verdict if isinstance(verdict, str) else "kept")
        if isinstance(verdict, str):
            rejected[verdict] += 1
            continue
        failing = verdict
        per_fn[key] += 1
        tier = options.tiers[len(records) % len(options.tiers)]
        records.append(
            _record(
                pkg,
                archive.relative_to(out_dir),
                path,
                fn,
                kind,
                site,
                texts[path],
                new,
                failing,
                passed,
                tests,
                tier,
                run.log,
                complete,
            )
        )
    stats.kept = len(records)
    stats.rejected = dict(rejected)
    stats.by_mutator = dict(Counter(r["meta"]["mutation"]["mutator"] for r in records))
    stats.seconds = round(time.monotonic() - start, 1)
    shutil.rmtree(base.parent, ignore_errors=True)
    shutil.rmtree(fixed, ignore_errors=True)
    return records, stats


def _fresh(fixed: Path, where: Path) -> Path:
    repo = where / "repo"
    copy_tree(fixed, repo)
    return repo


def _check(
    work: Path,
    module: str,
    tests: Sequence[str],
    test_args,
    limits: Limits,
    passed: list[str],
    max_fraction: float,
):
    """('reason', run) for a rejected mutant, (failing ids, run) for a kept one."""
    imp = run_command(
        ["python", "-I", "-c", f"import os, sys; sys.path.insert(0, os.getcwd()); import {module}"],
        work,
        Limits(wall_seconds=30, memory_mb=2048, max_processes=16),
    )
    if not imp.ok:
        return "import_error", None
    run = run_tests(work, tests, test_args=test_args, limits=limits)
    if run.timed_out or run.killed_reason:
        return "timeout", run
    still = {t for t, s in run.reported.items() if s == "PASSED"}
    failing = [t for t in passed if t not in still]
    if not failing:
        return "no_failure", run
    if len(failing) > max_fraction * len(passed):
        return "too_many_failures", run
    return failing, run


def _record(
    pkg: PackageSource,
    archive_rel: Path,
    path: str,
    fn: Function,
    kind: str,
    site: int,
    fixed_text: str,
    mutant: str,
    failing: list[str],
    passed: list[str],
    tests: list[str],
    tier: int,
    log: str,
    complete,
) -> dict:
    failing_set = set(failing)
    f2p = tuple(failing)
    facts = issues.Facts(
        package=pkg.name,
        file=path,
        function=fn.name,
        failing=f2p,
        messages=issues.summary_messages(log, f2p[:3]),
        block=issues.failure_block(log, f2p[0]),
    )
    text = (
        issues.model_issue(facts, tier, complete)
        if complete
        else issues.template_issue(facts, tier)
    )
    digest = hashlib.sha1(mutant.encode()).hexdigest()[:8]
    return {
        "instance_id": f"{pkg.name}__{fn.name.split('.')[-1]}__{kind}__{digest}",
        "repo": f"practicum/{pkg.name}",
        "base_commit": "",
        "version": pkg.version,
        "problem_statement": text,
        "hints_text": "",
        "created_at": "",
        "environment_setup_commit": "",
        "patch": file_diff(path, mutant, fixed_text),
        "test_patch": "",
        "FAIL_TO_PASS": json.dumps(list(f2p)),
        "PASS_TO_PASS": json.dumps([t for t in passed if t not in failing_set]),
        "source": archive_rel.as_posix(),
        "bug_patch": file_diff(path, fixed_text, mutant),
        "test_files": tests,
        "test_args": list(pkg.test_args),
        "tier": tier,
        "meta": {
            "package": pkg.name,
            "mutation": {
                "file": path,
                "function": fn.name,
                "mutator": kind,
                "site": site,
                "line": fn.line,
            },
        },
    }


def write_suite(records: list[dict], yields: list[Yield], out_dir: Path) -> Path:
    """Write out_dir/instances.jsonl and out_dir/yield.json; return the JSONL path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "instances.jsonl"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    (out_dir / "yield.json").write_text(json.dumps([asdict(y) for y in yields], indent=1) + "\n")
    return path
