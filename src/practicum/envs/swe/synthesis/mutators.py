"""Procedural bug mutators on one function, with libcst (after SWE-smith's procedural
modifiers, arXiv 2504.21798; own code).

Each mutator counts its *sites* inside a target function and rewrites exactly one of them:

    op_flip        `+`<->`-`, `*`<->`/`, `==`<->`!=`, `<`<->`>=`, `in`<->`not in`, `and`<->`or`, ...
    op_swap        swaps the operands of a binary operation or a single comparison
    change_const   an integer constant n becomes n+1 or n-1 (0 and 1 swap)
    remove_cond    drops an `if` statement that has no else branch
    remove_loop    drops a `for` / `while` loop
    remove_assign  drops an assignment / augmented assignment
    invert_if      swaps the two branches of an if/else
    shuffle        swaps two adjacent statements of a block

`mutate(source, function, mutator, site)` returns the new module source, or None when the
result is unchanged or does not compile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

_FLIP_BIN = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.FloorDivide,
    cst.FloorDivide: cst.Multiply,
    cst.Divide: cst.Multiply,
    cst.Modulo: cst.FloorDivide,
    cst.BitAnd: cst.BitOr,
    cst.BitOr: cst.BitAnd,
    cst.LeftShift: cst.RightShift,
    cst.RightShift: cst.LeftShift,
}
_FLIP_CMP = {
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.LessThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThan,
    cst.GreaterThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.GreaterThan,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
}
_FLIP_BOOL = {cst.And: cst.Or, cst.Or: cst.And}

MUTATORS = (
    "op_flip",
    "op_swap",
    "change_const",
    "remove_cond",
    "remove_loop",
    "remove_assign",
    "invert_if",
    "shuffle",
)


@dataclass(frozen=True)
class Function:
    """A function (or method) of a module: qualified name, first and last line, complexity."""

    name: str
    line: int
    end_line: int
    complexity: int


class _Functions(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self):
        self.stack: list[str] = []
        self.found: list[Function] = []

    def visit_ClassDef(self, node):
        self.stack.append(node.name.value)

    def leave_ClassDef(self, node):
        self.stack.pop()

    def visit_FunctionDef(self, node):
        pos = self.get_metadata(PositionProvider, node)
        self.stack.append(node.name.value)
        self.found.append(
            Function(".".join(self.stack), pos.start.line, pos.end.line, _complexity(node))
        )

    def leave_FunctionDef(self, node):
        self.stack.pop()


def _complexity(node: cst.CSTNode) -> int:
    """1 + branches, loops, boolean operators, comparisons and except clauses (McCabe-like)."""
    kinds = (
        cst.If,
        cst.For,
        cst.While,
        cst.BooleanOperation,
        cst.Comparison,
        cst.ExceptHandler,
        cst.IfExp,
        cst.CompFor,
    )
    count = 1

    class V(cst.CSTVisitor):
        def on_visit(self, n):
            nonlocal count
            count += isinstance(n, kinds)
            return True

    node.visit(V())
    return count


def functions(source: str) -> list[Function]:
    """Every function and method of a module's source, with its complexity."""
    v = _Functions()
    MetadataWrapper(cst.parse_module(source)).visit(v)
    return v.found


class _Mutate(cst.CSTTransformer):
    """Counts the sites of `kind` inside the target function; rewrites site number `target`."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, kind: str, function: Function | None, target: int):
        self.kind, self.function, self.target = kind, function, target
        self.depth = 0
        self.sites = 0
        self.done = False
        self.stack: list[int] = []
        self.counts: dict[int, int] = {}
        """Count mode (function None): sites per function start line, nested ones included."""

    # -- scope: only inside the target function ------------------------------------------
    def visit_FunctionDef(self, node):
        line = self.get_metadata(PositionProvider, node).start.line
        self.stack.append(line)
        if self.function is None:
            self.depth += 1
        elif self.depth:
            self.depth += 1
        elif line == self.function.line:
            self.depth = 1

    def leave_FunctionDef(self, original, updated):
        self.stack.pop()
        if self.depth:
            self.depth -= 1
        return updated

    def _hit(self) -> bool:
        """Count a site; True when it is the one to rewrite."""
        if not self.depth:
            return False
        if self.function is None:
            for line in self.stack:
                self.counts[line] = self.counts.get(line, 0) + 1
            return False
        n = self.sites
        self.sites += 1
        if n == self.target:
            self.done = True
            return True
        return False

    # -- operators ---------------------------------------------------------------------
    def leave_BinaryOperation(self, original, updated):
        if self.kind == "op_flip" and type(updated.operator) in _FLIP_BIN and self._hit():
            return updated.with_changes(operator=_FLIP_BIN[type(updated.operator)]())
        if self.kind == "op_swap" and self._hit():
            return updated.with_changes(left=updated.right, right=updated.left)
        return updated

    def leave_Comparison(self, original, updated):
        ops = updated.comparisons
        if (
            self.kind == "op_flip"
            and len(ops) == 1
            and type(ops[0].operator) in _FLIP_CMP
            and self._hit()
        ):
            new_op = _FLIP_CMP[type(ops[0].operator)]()
            return updated.with_changes(comparisons=[ops[0].with_changes(operator=new_op)])
        if (
            self.kind == "op_swap"
            and len(ops) == 1
            and type(ops[0].operator)
            in (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)
            and self._hit()
        ):
            return updated.with_changes(
                left=ops[0].comparator, comparisons=[ops[0].with_changes(comparator=updated.left)]
            )
        return updated

    def leave_BooleanOperation(self, original, updated):
        if self.kind == "op_flip" and self._hit():
            return updated.with_changes(operator=_FLIP_BOOL[type(updated.operator)]())
        return updated

    def leave_Integer(self, original, updated):
        if self.kind == "change_const" and self._hit():
            value = int(updated.value, 0)
            new = {0: 1, 1: 0}.get(value, value + 1 if value % 2 else value - 1)
            return updated.with_changes(value=str(new))
        return updated

    # -- statements --------------------------------------------------------------------
    def leave_If(self, original, updated):
        if self.kind == "invert_if" and isinstance(updated.orelse, cst.Else) and self._hit():
            return updated.with_changes(
                body=updated.orelse.body, orelse=updated.orelse.with_changes(body=updated.body)
            )
        return updated

    def leave_IndentedBlock(self, original, updated):
        return self._statements(original, updated)

    def _statements(self, original, updated):
        if not self.depth or self.kind not in (
            "remove_cond",
            "remove_loop",
            "remove_assign",
            "shuffle",
        ):
            return updated
        block = updated
        body = list(block.body)
        if self.kind == "shuffle":
            for i in range(len(body) - 1):
                if _is_docstring(body[i]) or isinstance(body[i + 1], cst.FunctionDef):
                    continue
                if self._hit():
                    body[i], body[i + 1] = body[i + 1], body[i]
                    return block.with_changes(body=body)
            return updated
        for i, stmt in enumerate(body):
            if self._removable(stmt) and len(body) > 1 and self._hit():
                return block.with_changes(body=body[:i] + body[i + 1 :])
        return updated

    def _removable(self, stmt) -> bool:
        if self.kind == "remove_cond":
            return isinstance(stmt, cst.If) and stmt.orelse is None
        if self.kind == "remove_loop":
            return isinstance(stmt, (cst.For, cst.While))
        if self.kind == "remove_assign":
            return (
                isinstance(stmt, cst.SimpleStatementLine)
                and len(stmt.body) == 1
                and isinstance(stmt.body[0], (cst.Assign, cst.AugAssign, cst.AnnAssign))
            )
        return False


def _is_docstring(stmt) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def site_counts(module: MetadataWrapper, mutator: str) -> dict[int, int]:
    """Sites of `mutator` per function start line (a function's count includes nested ones)."""
    t = _Mutate(mutator, None, target=-1)
    module.visit(t)
    return t.counts


def mutate(source: str, function: Function, mutator: str, site: int) -> str | None:
    """The module source with site number `site` of `mutator` rewritten inside `function`;
    None when nothing changed or the result does not compile."""
    if mutator not in MUTATORS:
        raise ValueError(f"unknown mutator {mutator!r}; expected one of {', '.join(MUTATORS)}")
    t = _Mutate(mutator, function, target=site)
    new = MetadataWrapper(cst.parse_module(source)).visit(t).code
    if not t.done or new == source:
        return None
    try:
        compile(new, "<mutant>", "exec")
    except SyntaxError:
        return None
    return new


def candidates(
    source: str, min_complexity: int = 3, mutators: Sequence[str] = MUTATORS
) -> list[tuple[Function, str, int]]:
    """Every (function, mutator, site) of a module, for functions of complexity >= the bound."""
    module = MetadataWrapper(cst.parse_module(source))
    fv = _Functions()
    module.visit(fv)
    fns = [fn for fn in fv.found if fn.complexity >= min_complexity]
    out = []
    for m in mutators:
        counts = site_counts(module, m)
        for fn in fns:
            out.extend((fn, m, k) for k in range(counts.get(fn.line, 0)))
    return out
