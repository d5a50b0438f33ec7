"""Milestones need evidence of the step happening, not only a marker after a likely statement.

A marker says "the script got past this statement"; the names in the statement say little
(`class Model` with an empty `fit`, `accuracy_score([0], [0])`, a constant written to
submission.csv). So after instrumentation each marker print is given an evidence expression
built from the statement it follows (`attach`), evaluated at run time by a helper the launcher
defines (`launch.BOOTSTRAP`: exceptions there never break the script), and the judge checks the
numbers against the competition's sizes (`proven`):

    libraries_imported   the code imports a data / ML library (static check)
    data_loaded          the loaded table has as many rows as train.csv, test.csv or both
    features_prepared    the prepared matrix has >= min(test rows, train rows / 10) rows
    model_built          the object is an instance of a library class with fit/predict/forward
    model_trained        `.fit` (or `.train`) got >= half the training rows
    validation_scored    a finite value, scored on >= min(test rows, train rows / 10) rows
    predictions_written  submission.csv has exactly one row per test row (checked on the file)

A marker whose statement offers no evidence (e.g. the LLM instrumenter put it elsewhere)
earns nothing for milestones that need it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from practicum.envs.mle.credit.marker_checks import marker_of
from practicum.envs.mle.credit.milestones import MILESTONES
from practicum.pyast import parse as ast_parse

ROWS = "__practicum_rows__"
"""Run-time helper: rows of the object a thunk returns (shape[0] or len), -1 on any error."""
ESTIMATOR = "__practicum_estimator__"
"""Run-time helper: 1 when the object is a library estimator (module docstring), else 0."""
ML_LIBRARIES = frozenset(
    "numpy pandas sklearn scipy torch tensorflow keras xgboost lightgbm catboost statsmodels "
    "polars jax csv".split()
)
_PURE = (
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Constant,
    ast.Slice,
    ast.Tuple,
    ast.List,
    ast.UnaryOp,
    ast.expr_context,
    ast.unaryop,
)


@dataclass(frozen=True)
class Sizes:
    """Row counts the evidence is checked against."""

    train: int
    test: int


def _pure(node: ast.AST) -> bool:
    """Re-evaluating it only reads names (no call, so no side effect worth a thought)."""
    return all(isinstance(n, _PURE) for n in ast.walk(node))


def _first_target(stmt: ast.stmt) -> str | None:
    targets = (
        stmt.targets
        if isinstance(stmt, ast.Assign)
        else ([stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else [])
    )
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)) and target.elts:
            target = target.elts[0]
        if isinstance(target, (ast.Name, ast.Attribute, ast.Subscript)) and _pure(target):
            return ast.unparse(target)
    return None


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _fit_rows_expr(stmt: ast.stmt) -> str | None:
    for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
        if _call_name(call) in ("fit", "train", "fit_predict") and isinstance(
            call.func, ast.Attribute
        ):
            data = (
                call.args[0]
                if call.args
                else next((k.value for k in call.keywords if k.arg in ("X", "x")), None)
            )
            if data is not None and _pure(data):
                return ast.unparse(data)
    return None


def _scored_rows_expr(stmt: ast.stmt) -> str | None:
    for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
        name = _call_name(call)
        index = 1 if name in ("cross_val_score", "cross_validate") else 0
        if name.endswith(("_score", "_error", "_loss", "loss")) or index:
            if len(call.args) > index and _pure(call.args[index]):
                return ast.unparse(call.args[index])
    return None


def evidence_expr(milestone: str, stmt: ast.stmt | None) -> str | None:
    """Python expression (over the helpers) giving `milestone`'s evidence after `stmt`."""
    if stmt is None:
        return None
    if milestone in ("data_loaded", "features_prepared"):
        target = _first_target(stmt)
        return f"{ROWS}(lambda: {target})" if target else None
    if milestone == "model_built":
        target = _first_target(stmt)
        return f"{ESTIMATOR}(lambda: {target})" if target else None
    if milestone == "model_trained":
        data = _fit_rows_expr(stmt)
        return f"{ROWS}(lambda: {data})" if data else None
    if milestone == "validation_scored":
        data = _scored_rows_expr(stmt)
        return f"{ROWS}(lambda: {data})" if data else None
    return None


def _blocks(tree: ast.AST):
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block
        for clause in getattr(node, "handlers", []) + getattr(node, "cases", []):
            yield clause.body


def attach(code: str, nonce: str) -> tuple[str, list[int]]:
    """Give every marker print of run `nonce` its evidence (module docstring).

    Returns the new code and the 1-based numbers of its marker-print lines (the lines the
    launcher maps back onto the policy's own line numbers).
    """
    tree = ast_parse(code)
    lines = code.splitlines()
    prefix = f"[[PRACTICUM:{nonce}:"
    replace: dict[int, tuple[int, str]] = {}  # first line -> (last line, new line)
    for block in _blocks(tree):
        previous: ast.stmt | None = None
        for stmt in block:
            text = marker_of(stmt)
            if text is None or not text.startswith(prefix):
                previous = stmt
                continue
            milestone = text[len(prefix) :].split("]]", 1)[0]
            indent = lines[stmt.lineno - 1][
                : len(lines[stmt.lineno - 1]) - len(lines[stmt.lineno - 1].lstrip())
            ]
            value = _value_of(stmt)
            expr = evidence_expr(milestone, previous) if milestone in MILESTONES else None
            fmt, args = f"{prefix}{milestone}]]", []
            if value is not None:
                fmt, args = fmt + " value=%r", [value]
            if expr is not None:
                fmt, args = fmt + " n=%s", [*args, expr]
            rendered = repr(fmt) if not args else f"{fmt!r} % ({', '.join(args)},)"
            replace[stmt.lineno] = (stmt.end_lineno, f"{indent}print({rendered}, flush=True)")
    out: list[str] = []
    markers: list[int] = []
    number = 1
    while number <= len(lines):
        if number in replace:
            last, line = replace[number]
            out.append(line)
            markers.append(len(out))
            number = last + 1
        else:
            out.append(lines[number - 1])
            number += 1
    return "\n".join(out) + "\n", markers


def _value_of(stmt: ast.Expr) -> str | None:
    """The value expression of a `print("..." % value)` marker, as source; None without one."""
    arg = stmt.value.args[0]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod):
        return ast.unparse(arg.right)
    return None


def imports_ml_library(code: str) -> bool:
    try:
        tree = ast_parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        if any(n.split(".")[0] in ML_LIBRARIES for n in names):
            return True
    return False


def proven(milestone: str, evidence: list[int], sizes: Sizes) -> bool:
    """Whether the evidence numbers printed with `milestone`'s markers prove it (docstring);
    libraries_imported and predictions_written are judged elsewhere (always True here)."""
    few = max(2, min(sizes.test, sizes.train // 10))
    if milestone == "data_loaded":
        wanted = {sizes.train, sizes.test, sizes.train + sizes.test}
        return any(n in wanted or n - 1 in wanted for n in evidence)
    if milestone in ("features_prepared", "validation_scored"):
        return any(n >= few for n in evidence)
    if milestone == "model_built":
        return any(n == 1 for n in evidence)
    if milestone == "model_trained":
        return any(n >= max(2, sizes.train // 2) for n in evidence)
    return True
