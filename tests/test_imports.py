"""The package's import graph: no cycles, and the layers import downwards only.

Every module of `practicum` is parsed (never imported); an edge A -> B means A imports B at
module level or inside a function. Cycles are checked twice: among the imports that run, and
with those under `if TYPE_CHECKING:` too. Annotation-only imports never run, but two modules
whose types name each other still cannot be read or moved apart (three of the five cycles of
issue 21 were of that kind). The layering rule counts them as well: a type annotation that
names an environment still makes sampling code know about environments.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import practicum

ROOT = Path(practicum.__file__).parent

LAYERS = {
    "practicum.engine": ("practicum.envs", "practicum.runtime", "practicum.config"),
    "practicum.envs": ("practicum.runtime",),
    "practicum.learner": (
        "practicum.runtime",
        "practicum.envs",
        "practicum.episode",
        "practicum.batch",
    ),
    "practicum.finetune": ("practicum.runtime.session", "practicum.runtime.loop", "practicum.envs"),
    "practicum.cli": ("practicum.envs",),
}
"""Package -> packages it must not import: sampling knows no environment and no loop, and an
environment does not drive the loop; the engine declares its own options, which the config
composes (never the reverse); the learner trains the rows the driver built, knowing no loop,
session, environment or episode; SFT / RFT training knows no session and no environment (its
stages in runtime/ do); the command line knows no environment: each registers its own
commands."""

SEAMS = {"practicum.cli": ("practicum.envs.registry",)}
"""Modules a layer may import although LAYERS forbids their package: the command line reaches
the environments (their options, audits and commands) only through their registry."""


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file for every importable module under `root` (data folders such as
    tasks/competitions/<id>/, whose names are not identifiers, are not modules)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if all(p.isidentifier() for p in parts):
            modules[".".join([package, *parts])] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool):
    """Import and ImportFrom nodes anywhere in `tree` (functions included); those under
    `if TYPE_CHECKING:` only when `type_checking`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted `name` that is a module of the package."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return None


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]
) -> set[str]:
    """Modules of the package that `node`, found in `module`, imports."""
    if isinstance(node, ast.Import):
        return {t for a in node.names if (t := _known(a.name, modules))}
    base = node.module or ""
    if node.level:
        anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join(anchor + ([base] if base else []))
    found = set()
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        target = sub if sub in modules else _known(base, modules)
        if target:
            found.add(target)
    return found


def import_graph(
    root: Path = ROOT, package: str = "practicum", type_checking: bool = False
) -> dict[str, set[str]]:
    """Module -> modules of the package it imports (itself excluded)."""
    modules = module_files(root, package)
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in _imports(tree, type_checking):
            edges |= _targets(node, module, is_package, modules)
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def cycle_path(graph: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """One cycle through the component's first module, as a path that ends where it starts."""
    start = min(component)
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for nxt in sorted(graph[path[-1]] & component):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                paths.append(path + [nxt])
    raise AssertionError(f"{sorted(component)} is not a cycle")


def describe(graph: dict[str, set[str]], components) -> str:
    return "\n".join(" -> ".join(cycle_path(graph, c)) for c in components)


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        for layer, forbidden in LAYERS.items():
            if module == layer or module.startswith(layer + "."):
                out += [
                    f"{module} imports {t}"
                    for t in sorted(targets)
                    if any(t == f or t.startswith(f + ".") for f in forbidden)
                    and t not in SEAMS.get(layer, ())
                ]
    return out


# --- the package ---


@pytest.mark.parametrize("type_checking", [False, True], ids=["run-time", "with-annotations"])
def test_the_package_has_no_import_cycles(type_checking):
    graph = import_graph(type_checking=type_checking)
    found = cycles(graph)
    assert not found, "import cycles:\n" + describe(graph, found)


def test_layers_import_downwards_only():
    assert layering_violations(import_graph(type_checking=True)) == []


def test_the_walk_sees_the_whole_package():
    graph = import_graph()
    assert "practicum.envs.mle.competitions.grading" in graph
    assert "practicum.runtime.ray_cluster" in graph["practicum.runtime.ray_engine"]  # in a function
    assert not any("-" in m for m in graph)  # competition data folders are not modules


# --- the analysis, on a small made-up package ---


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_relative_and_submodule_imports_are_resolved(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "from . import b\nfrom .c import thing\n",
            "a/b.py": "from ..d import x\nimport pkg.a.c as c\n",
            "a/c.py": "thing = 1\n",
            "d.py": "from pkg import a\nfrom pkg.a import nothing_here\nimport os\nx = 1\n",
        },
    )
    graph = import_graph(root, "pkg")
    assert graph["pkg.a"] == {"pkg.a.b", "pkg.a.c"}
    assert graph["pkg.a.b"] == {"pkg.d", "pkg.a.c"}
    assert graph["pkg.d"] == {"pkg.a"}


def test_function_imports_count_and_type_checking_ones_only_for_layering(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "x.py": "def f():\n    from pkg import y\n",
            "y.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import x\n"
                "else:\n    from pkg import z\n"
            ),
            "z.py": "import typing\nif typing.TYPE_CHECKING:\n    import pkg.y\n",
        },
    )
    assert import_graph(root, "pkg") == {
        "pkg": set(),
        "pkg.x": {"pkg.y"},
        "pkg.y": {"pkg.z"},
        "pkg.z": set(),
    }
    assert import_graph(root, "pkg", type_checking=True)["pkg.y"] == {"pkg.x", "pkg.z"}


def test_cycles_are_found_and_named():
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"f"},
        "f": {"e"},
        "g": {"a"},
    }
    found = cycles(graph)
    assert sorted(map(sorted, found)) == [["a", "b", "c"], ["e", "f"]]
    assert describe(graph, [frozenset("abc")]) == "a -> b -> c -> a"


def test_layering_names_each_violation():
    graph = {
        "practicum.engine.x": {"practicum.envs.base", "practicum.engine.y"},
        "practicum.envs.y": {"practicum.runtime.loop", "practicum.engine.x"},
        "practicum.runtime.loop": {"practicum.envs.base"},
    }
    assert layering_violations(graph) == [
        "practicum.engine.x imports practicum.envs.base",
        "practicum.envs.y imports practicum.runtime.loop",
    ]


def test_the_seams_contracts_are_enforced():
    """Issue 38's contracts: the command line imports no environment (the registry only), the
    engine no config, the learner no runtime loop; function-local imports count."""
    graph = {
        "practicum.cli": {
            "practicum.envs.registry",
            "practicum.envs.mle.cli",
            "practicum.serve.cli",
        },
        "practicum.engine.options": {"practicum.config"},
        "practicum.learner.step": {"practicum.runtime.loop", "practicum.config"},
    }
    assert layering_violations(graph) == [
        "practicum.cli imports practicum.envs.mle.cli",
        "practicum.engine.options imports practicum.config",
        "practicum.learner.step imports practicum.runtime.loop",
    ]
