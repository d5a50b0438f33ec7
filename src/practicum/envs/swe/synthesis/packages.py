"""Where a package to synthesize tasks from comes from: a bundled source name, an sdist, or a
folder. Each resolves to a `PackageSource`: a source archive we wrote (trusted), the import
name, the test files and extra pytest arguments."""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from practicum.envs.swe.diffs import is_protected
from practicum.envs.swe.repo import RepoError, extract_source


@dataclass(frozen=True)
class PackageSource:
    name: str
    version: str
    module: str
    """Import name (a top-level package folder or module of the repository)."""
    archive: Path
    """A .tar.gz of the repository at its fixed state (root = repository root)."""
    test_args: tuple[str, ...] = ()
    license: str = ""
    extra: dict = field(default_factory=dict)


def resolve(spec: str, scratch: Path) -> PackageSource:
    """A bundled name (`inflection`), an sdist (`x-1.0.tar.gz`) or a folder."""
    from practicum.tasks.swe import HERE, bundled_packages

    bundled = bundled_packages()
    if spec in bundled:
        r = bundled[spec]
        return PackageSource(
            spec,
            r["version"],
            r["module"],
            HERE / r["archive"],
            tuple(r.get("test_args", ())),
            r.get("license", ""),
        )
    path = Path(spec)
    if not path.exists():
        raise RepoError(
            f"package {spec!r}: not a bundled name ({', '.join(bundled)}) "
            "nor an existing sdist or folder"
        )
    stem = path.name.removesuffix(".tar.gz").removesuffix(".tgz").removesuffix(".zip")
    tree = scratch / "import" / stem
    extract_source(path, tree)
    roots = [p for p in tree.iterdir() if p.is_dir()]
    if path.is_file() and len(list(tree.iterdir())) == 1 and roots:
        tree = roots[0]  # an sdist's single top folder
    module = _module(tree)
    name, _, version = tree.name.rpartition("-") if "-" in tree.name else (tree.name, "", "0")
    archive = scratch / f"{name or module}-{version}.tar.gz"
    pack(tree, archive)
    return PackageSource(name or module, version, module, archive)


def _module(tree: Path) -> str:
    pkgs = [
        p.name
        for p in sorted(tree.iterdir())
        if p.is_dir() and (p / "__init__.py").exists() and not is_protected(p.name + "/x.py")
    ]
    if not pkgs:
        pkgs = [
            p.stem
            for p in sorted(tree.glob("*.py"))
            if not is_protected(p.name) and p.stem not in ("setup", "conftest")
        ]
    if not pkgs:
        raise RepoError(f"{tree}: no top-level package or module found")
    return pkgs[0]


def pack(tree: Path, archive: Path) -> None:
    """Write a folder as a .tar.gz with stable metadata (no caches, no VCS folders)."""
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted(tree.rglob("*")):
            rel = p.relative_to(tree)
            if (
                not p.is_file()
                or p.is_symlink()
                or any(
                    part in (".git", "__pycache__", ".tox") or part.endswith(".egg-info")
                    for part in rel.parts
                )
            ):
                continue
            data = p.read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))


def source_and_test_files(tree: Path, module: str) -> tuple[list[str], list[str]]:
    """(module source files to mutate, test files) as repository paths."""
    tests = sorted(
        p.relative_to(tree).as_posix()
        for p in tree.rglob("*.py")
        if p.name.startswith("test_") or p.name.endswith("_test.py")
    )
    root = tree / module
    files = [root.with_suffix(".py")] if not root.is_dir() else sorted(root.rglob("*.py"))
    sources = [p.relative_to(tree).as_posix() for p in files if p.is_file()]
    sources = [s for s in sources if not is_protected(s) and s not in tests]
    return sources, tests


def copy_archive(src: Path, out_dir: Path) -> Path:
    dest = out_dir / "sources" / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.resolve() != src.resolve():
        shutil.copyfile(src, dest)
    return dest


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="practicum-swe-synth-"))
