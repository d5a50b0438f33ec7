"""Checking instrumented code: what counts as a marker print, and that a rewrite adds only those.

`instrument.instrument` accepts the LLM's rewrite only when `only_prints_added` holds, it adds
a marker with the run's nonce (`markers_with_nonce`) and its marker values read no name the
original never binds (`unbound_marker_names`).
"""

from __future__ import annotations

import ast
import re

from practicum.envs.mle.credit.milestones import MARKER_PREFIX
from practicum.pyast import parse as ast_parse

_MARKER_TEXT = re.compile(r"^\[\[PRACTICUM:[0-9a-f]+:[a-z_]+\]\]")


def marker_of(stmt: ast.stmt) -> str | None:
    """The marker text of `print("[[PRACTICUM:..]]" [% value], flush=True)`, else None.

    The value may only read names: no call but float(), .mean() and __import__("numpy"), no
    walrus, so an accepted print cannot change what the script computes.
    """
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "print" and len(call.args) == 1):
        return None
    if not all(k.arg == "flush" for k in call.keywords):
        return None
    arg = call.args[0]
    text = arg.left if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) else arg
    if not (
        isinstance(text, ast.Constant)
        and isinstance(text.value, str)
        and _MARKER_TEXT.match(text.value)
    ):
        return None
    for node in ast.walk(arg):
        if isinstance(node, (ast.NamedExpr, ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom)):
            return None
        if isinstance(node, ast.Call) and not _allowed_in_marker(node):
            return None
    return text.value


def _allowed_in_marker(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr == "mean"
    if isinstance(func, ast.Name) and func.id == "__import__":
        return (
            len(call.args) == 1
            and isinstance(call.args[0], ast.Constant)
            and call.args[0].value == "numpy"
        )
    return isinstance(func, ast.Name) and func.id == "float"


def is_marker_print(stmt: ast.stmt) -> bool:
    """True when `stmt` is a marker print (`marker_of`)."""
    return marker_of(stmt) is not None


class _StripMarkers(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(node, name, [s for s in block if not is_marker_print(s)])
        return node


def _dump_without_markers(code: str) -> str:
    return ast.dump(_StripMarkers().visit(ast_parse(code)), include_attributes=False)


def only_prints_added(original: str, rewritten: str) -> bool:
    """True when `rewritten` equals `original` up to marker prints (compared as ASTs).

    Marker prints are removed from both sides (a forged one in the original must not make
    every rewrite fail); positions, comments and formatting are ignored.
    """
    try:
        return _dump_without_markers(original) == _dump_without_markers(rewritten)
    except (SyntaxError, ValueError, RecursionError):
        return False


def markers_with_nonce(code: str, nonce: str) -> int:
    """How many marker prints of `code` carry this run's nonce."""
    tag = f"{MARKER_PREFIX}{nonce}:"
    return sum(
        1
        for node in ast.walk(ast_parse(code))
        if isinstance(node, ast.stmt) and (marker_of(node) or "").startswith(tag)
    )


def unbound_marker_names(original: str, rewritten: str) -> set[str]:
    """Names read by marker values that the original never binds (e.g. a copied placeholder)."""
    tree = ast_parse(original)
    bound = {"float", "__import__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    read = {
        n.id
        for stmt in ast.walk(ast_parse(rewritten))
        if isinstance(stmt, ast.stmt) and marker_of(stmt)
        for n in ast.walk(stmt.value.args[0])
        if isinstance(n, ast.Name)
    }
    return read - bound - {"print"}
