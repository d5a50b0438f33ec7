"""The rule-based instrumenter: an AST-guided inserter of milestone marker prints, no model.

`instrument.instrument` uses it when there is no LLM instrumenter or its rewrite is
unusable. Which statement reaches which milestone is `milestone_detection`'s job; this module
decides where the prints go. Rules insert text lines after whole statements (in the statement's own
block), so comments and formatting of the original survive.
"""

from __future__ import annotations

import ast

from practicum.envs.mle.credit.milestone_detection import milestones_of
from practicum.envs.mle.credit.milestones import MILESTONES, marker_line
from practicum.pyast import parse as ast_parse

_MARK_LAST = {"data_loaded", "features_prepared"}


def _blocks(tree: ast.Module):
    """Every statement list in the tree, as (owning statement or None for the module, list)."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.stmt)):
            continue
        owner = None if isinstance(node, ast.Module) else node
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield owner, block
        for clause in getattr(node, "handlers", []) + getattr(node, "cases", []):  # except / case
            yield owner, clause.body


def rule_instrument(code: str, nonce: str) -> str:
    """Insert marker prints after the statements that reach each milestone (module docstring).

    libraries_imported goes once after the last top-level import. In every block, data_loaded
    and features_prepared go after the LAST statement reaching them (loading/preparing is
    done), the others after the FIRST (the earliest proof). Per block, so code in a function
    that never runs does not hide another path; repeats are harmless, milestones count once.
    A `return` statement gets its marker only if nothing else reaches that milestone,
    inserted before it.
    """
    tree = ast_parse(code)
    lines = code.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    parent: dict[int, tuple[ast.stmt | None, list[ast.stmt]]] = {}
    for owner, block in _blocks(tree):
        for stmt in block:
            parent[id(stmt)] = (owner, block)

    def anchor(stmt: ast.stmt) -> tuple[int, str] | None:
        """(line index to insert after, indent) so the print runs right after `stmt`."""
        owner, block = parent[id(stmt)]
        first = last = block.index(stmt)
        while first > 0 and block[first - 1].end_lineno == block[first].lineno:
            first -= 1
        while last + 1 < len(block) and block[last + 1].lineno == block[last].end_lineno:
            last += 1
        head = block[first]
        prefix = _prefix(lines, head)
        if not prefix.strip():
            return block[last].end_lineno, prefix
        return anchor(owner) if owner is not None and id(owner) in parent else None

    after: dict[int, list[str]] = {}
    before: dict[int, list[str]] = {}

    def add(where: dict[int, list[str]], at: tuple[int, str] | None, line: str) -> None:
        if at is not None and at[1] + line not in where.setdefault(at[0], []):
            where[at[0]].append(at[1] + line)

    imports = [
        s
        for s in tree.body
        if isinstance(s, (ast.Import, ast.ImportFrom))
        and not (isinstance(s, ast.ImportFrom) and s.module == "__future__")
    ]
    if imports:
        add(after, anchor(imports[-1]), marker_line(nonce, "libraries_imported"))
    returns: dict[str, list[tuple[ast.stmt, str]]] = {}
    chosen: dict[tuple[int, str], tuple[ast.stmt, str]] = {}  # (block, milestone) -> statement
    simple = [
        s
        for s in ast.walk(tree)
        if isinstance(s, ast.stmt)
        and id(s) in parent
        and (
            isinstance(s, (ast.With, ast.AsyncWith))
            or not (hasattr(s, "body") or hasattr(s, "cases"))
        )
    ]
    for stmt in sorted(simple, key=lambda s: (s.lineno, s.col_offset)):
        for milestone, value in milestones_of(stmt):
            line = marker_line(nonce, milestone, value)
            if isinstance(stmt, ast.Return):
                returns.setdefault(milestone, []).append((stmt, line))
                continue
            key = (id(parent[id(stmt)][1]), milestone)
            if key not in chosen or milestone in _MARK_LAST:
                chosen[key] = (stmt, line)
    order = list(MILESTONES)
    for _key, (stmt, line) in sorted(
        chosen.items(), key=lambda c: (c[1][0].lineno, order.index(c[0][1]))
    ):
        add(after, anchor(stmt), line)
    reached = {milestone for _, milestone in chosen}
    for milestone, found in returns.items():
        for stmt, line in found:
            if milestone in reached or milestone == "validation_scored":
                continue
            prefix = _prefix(lines, stmt)
            if not prefix.strip():  # `return` starts its line: the print can go just above
                add(before, (stmt.lineno, prefix), line)
    out: list[str] = []
    for number, text in enumerate(lines, start=1):
        out.extend(f"{p}\n" for p in before.get(number, []))
        out.append(text)
        # several blocks can end on one line: close the innermost (most indented) first
        out.extend(f"{p}\n" for p in sorted(after.get(number, []), key=_indent_width, reverse=True))
    return "".join(out)


def _indent_width(line: str) -> int:
    return len(line) - len(line.lstrip())


def _prefix(lines: list[str], stmt: ast.stmt) -> str:
    """Text of the statement's first line before it (col_offset counts UTF-8 bytes)."""
    return lines[stmt.lineno - 1].encode()[: stmt.col_offset].decode(errors="replace")
