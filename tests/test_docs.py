"""docs/design.md stays true of the tree: every path it names exists, every package is named."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
PATH_ROOTS = ("src/", "tests/", "configs/", "scripts/", "benchmarks/", "docs/", "practicum/")


def named_paths(text: str) -> set[str]:
    """Backticked spans outside code fences that look like a path of the repository."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {span for span in re.findall(r"`([^`\s]+)`", text) if span.startswith(PATH_ROOTS)}


def resolve(path: str) -> Path:
    return ROOT / ("src/" + path if path.startswith("practicum/") else path)


def test_every_path_the_design_names_exists():
    paths = named_paths(DESIGN.read_text())
    assert len(paths) > 50  # the check reads the page
    assert sorted(p for p in paths if not resolve(p).exists()) == []


def test_every_package_is_named_in_the_design():
    paths = named_paths(DESIGN.read_text())
    packages = sorted(
        str(d.parent.relative_to(ROOT / "src")) + "/"
        for d in (ROOT / "src" / "practicum").rglob("__init__.py")
    )
    named = {p.removeprefix("src/") for p in paths}
    assert sorted(p for p in packages if not any(n.startswith(p) for n in named)) == []


def test_a_missing_path_is_caught():
    text = "see `practicum/nowhere.py` and `tests/` but not `rollout.agent` (```\n`src/x`\n```)"
    assert named_paths(text) == {"practicum/nowhere.py", "tests/"}
    assert not resolve("practicum/nowhere.py").exists() and resolve("tests/").exists()
