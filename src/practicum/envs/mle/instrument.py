"""Inserting milestone prints into the agent's script before it runs (arXiv 2509.01684, Sec. 3.2).

Two instrumenters, one contract: the output is the input plus marker print statements
(`milestones.marker_line`) and nothing else, which `only_prints_added` checks on the ASTs.
- `LLMInstrumenter`: a frozen model (by default the policy's base weights, adapter disabled)
  rewrites the script with the given print lines at the milestone points, as in the paper.
- `rule_instrument`: a deterministic AST-guided inserter, the fallback whenever the model's
  rewrite does not parse, adds no marker, or changes anything but prints.
Rules insert text lines after whole statements (in the statement's own block), so comments
and formatting of the original survive.
"""

from __future__ import annotations

import ast
import json
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from practicum.envs.mle.actions import ActionParseError, extract_code
from practicum.envs.mle.milestones import MARKER_PREFIX, MILESTONES, marker_line

_MARKER_TEXT = re.compile(r"^\[\[PRACTICUM:[0-9a-f]+:[a-z_]+\]\]")
_LOADERS = set(
    "read_csv read_parquet read_json read_table read_feather read_excel read_pickle load loadtxt "
    "genfromtxt load_svmlight_file load_dataset".split()
)
_MODEL_SUFFIX = re.compile(
    r"(Classifier|Regressor|Regression|Model|Pipeline|pipeline|SVC|SVR|NB|Ridge|"
    r"Lasso|ElasticNet|Net|Sequential|Booster|CV|Estimator)$"
)
_MODEL_NAME = re.compile(
    r"^((best|final|base)_)?(model|clf|classifier|regressor|estimator|pipeline|pipe)\d*$", re.I
)
_PREPROCESSOR = re.compile(
    r"(vec|tfidf|scaler|encoder|imputer|transformer|pca|svd|selector|^le$|^ohe$|^enc)", re.I
)
_FEATURE_NAME = re.compile(r"^(X|[Xx]_\w+|[Ff]eatures?|feats|\w+_features?)$")
_FEATURE_CALLS = {"fit_transform", "transform", "get_dummies", "train_test_split"}
_SCORERS = set(
    "accuracy_score balanced_accuracy_score roc_auc_score log_loss f1_score precision_score "
    "recall_score matthews_corrcoef cohen_kappa_score mean_squared_error root_mean_squared_error "
    "mean_absolute_error r2_score mean_squared_log_error median_absolute_error "
    "explained_variance_score cross_val_score score".split()
)
_NOT_MODELS = _SCORERS | {"predict", "predict_proba", "fit"}
_MARK_LAST = {"data_loaded", "features_prepared"}
_NUMERIC_WRAPPERS = {"sqrt", "mean", "float", "round", "abs", "exp", "log", "min", "max", "item"}


@dataclass(frozen=True)
class InstrumentResult:
    """The code to run and how its markers got there."""

    code: str
    method: Literal["llm", "rules", "none"]
    """Who inserted the markers; "none": nothing inserted (no milestone found, or bad code)."""
    rejected_reason: str | None = None
    """Why the LLM rewrite was not used (None when it was, or when there was no LLM)."""


# ------------------------------------------------------------------ validation


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
    return ast.dump(_StripMarkers().visit(ast.parse(code)), include_attributes=False)


def only_prints_added(original: str, rewritten: str) -> bool:
    """True when `rewritten` equals `original` up to marker prints (compared as ASTs).

    Marker prints are removed from both sides (a forged one in the original must not make
    every rewrite fail); positions, comments and formatting are ignored.
    """
    try:
        return _dump_without_markers(original) == _dump_without_markers(rewritten)
    except (SyntaxError, ValueError, RecursionError):
        return False


def _markers_with_nonce(code: str, nonce: str) -> int:
    tag = f"{MARKER_PREFIX}{nonce}:"
    return sum(
        1
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.stmt) and (marker_of(node) or "").startswith(tag)
    )


def _unbound_marker_names(original: str, rewritten: str) -> set[str]:
    """Names read by marker values that the original never binds (e.g. a copied placeholder)."""
    tree = ast.parse(original)
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
        for stmt in ast.walk(ast.parse(rewritten))
        if isinstance(stmt, ast.stmt) and marker_of(stmt)
        for n in ast.walk(stmt.value.args[0])
        if isinstance(n, ast.Name)
    }
    return read - bound - {"print"}


# ------------------------------------------------------------------ rules


def _call_name(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _receiver(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        value = func.value
        while isinstance(value, (ast.Attribute, ast.Call, ast.Subscript)):
            value = value.func if isinstance(value, ast.Call) else value.value
        return value.id if isinstance(value, ast.Name) else ""
    return ""


def _writes(call: ast.Call) -> bool:
    """A to_csv/savetxt call, or open() with a write/append mode."""
    name = _call_name(call)
    if name != "open":
        return name in ("to_csv", "savetxt")
    modes = [a for a in call.args[1:2]] + [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and str(m.value)[:1] in "wax" for m in modes)


def _numeric(node: ast.AST) -> bool:
    """Best guess that an expression is a number or array (safe to pass to numpy.mean)."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call):
        name = _call_name(node)
        return name in _SCORERS or name in _NUMERIC_WRAPPERS and all(_numeric(a) for a in node.args)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.IfExp):
        return _numeric(node.body) and _numeric(node.orelse)
    return False


def _targets(stmt: ast.stmt) -> list[ast.Name]:
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
        return [stmt.target]
    return []


def _milestones_of(stmt: ast.stmt) -> list[tuple[str, str | None]]:
    """(milestone, value expression) pairs a simple statement reaches (or a `with` header)."""
    node: ast.AST = stmt
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        node = ast.Tuple(elts=[item.context_expr for item in stmt.items], ctx=ast.Load())
    calls = _calls(node)
    names = {_call_name(c) for c in calls}
    targets = [t.id for t in _targets(stmt)]
    value = getattr(stmt, "value", None)
    found: list[tuple[str, str | None]] = []
    opens_csv = any(
        _call_name(c) == "open" and ".csv" in ast.unparse(c).lower() and not _writes(c)
        for c in calls
    )
    if names & _LOADERS or opens_csv:
        found.append(("data_loaded", None))
    if names & _FEATURE_CALLS or any(_FEATURE_NAME.match(t) for t in targets):
        found.append(("features_prepared", None))
    constructs = any(_MODEL_SUFFIX.search(name) for name in names)  # SomeClassifier(...)
    named = any(_MODEL_NAME.match(t) for t in targets)  # model = build(...)
    if constructs or named and isinstance(value, ast.Call) and _call_name(value) not in _NOT_MODELS:
        found.append(("model_built", None))
    if any(
        _call_name(c) in ("fit", "train") and not _PREPROCESSOR.search(_receiver(c)) for c in calls
    ):
        found.append(("model_trained", None))
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and names & _SCORERS
        and _numeric(value)
    ):
        found.append(("validation_scored", stmt.targets[0].id))
    writes = [c for c in calls if _writes(c)]
    if any("submission" in ast.unparse(c).lower() or "sub" in _receiver(c).lower() for c in writes):
        found.append(("predictions_written", None))
    return found


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
    tree = ast.parse(code)
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
        for milestone, value in _milestones_of(stmt):
            line = marker_line(nonce, milestone, value)
            if isinstance(stmt, ast.Return):
                returns.setdefault(milestone, []).append((stmt, line))
                continue
            key = (id(parent[id(stmt)][1]), milestone)
            if key not in chosen or milestone in _MARK_LAST:
                chosen[key] = (stmt, line)
    order = list(MILESTONES)
    for (_, milestone), (stmt, line) in sorted(
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


# ------------------------------------------------------------------ LLM

_PROMPT = """You add progress prints to a Python script. Do not change anything else.

Insert each line below, unchanged, on its own line right after the statement where the script \
reaches that milestone, with that statement's indentation. Skip milestones the script never \
reaches. Do not add, remove or edit any other code.

{lines}

Reply with the full modified script in one ```python code block and nothing else.

```python
{code}
```"""


class LLMInstrumenter:
    """Asks a frozen model to insert the marker prints (see module docstring)."""

    def __init__(self, complete: Callable[[str], str]):
        self.complete = complete
        """prompt -> reply text of the frozen instrumenter model."""

    def prompt(self, code: str, nonce: str) -> str:
        lines = []
        for milestone, where in MILESTONES.items():
            value = "SCORE" if milestone == "validation_scored" else None
            lines.append(f"- {where}:\n    {marker_line(nonce, milestone, value)}")
        lines.append("  (replace SCORE by the variable that holds the validation score)")
        return _PROMPT.format(lines="\n".join(lines), code=code.rstrip("\n"))

    def rewrite(self, code: str, nonce: str) -> str:
        """The model's instrumented script (unvalidated). Raises ActionParseError on no code."""
        return extract_code(self.complete(self.prompt(code, nonce))) + "\n"


def openai_complete(
    base_url: str,
    model: str,
    api_key: str | None = None,
    max_tokens: int = 4096,
    timeout: float = 300.0,
) -> Callable[[str], str]:
    """A `complete` function for an OpenAI-compatible server (vLLM, llama.cpp, ...), greedy.

    base_url: e.g. "http://localhost:8000/v1" (a missing "/v1" is added).
    """
    url = base_url.rstrip("/")
    url = (url if url.endswith("/v1") else url + "/v1") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def complete(prompt: str) -> str:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())["choices"][0]["message"]["content"] or ""

    return complete


# ------------------------------------------------------------------ entry point


def instrument(code: str, nonce: str, llm: LLMInstrumenter | None = None) -> InstrumentResult:
    """Code with milestone prints for run `nonce`: the LLM's rewrite if valid, else the rules'."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return InstrumentResult(code, "none", None)
    reason = None
    if llm is not None:
        try:
            rewritten = llm.rewrite(code, nonce)
        except ActionParseError as err:
            reason = f"rewrite unusable: {err}"
        except Exception as err:  # a down or slow instrumenter server costs only the LLM path
            reason = f"instrumenter failed: {type(err).__name__}: {err}"
        else:
            if not only_prints_added(code, rewritten):
                reason = "rewrite changes more than marker prints"
            elif _markers_with_nonce(rewritten, nonce) <= _markers_with_nonce(code, nonce):
                reason = "rewrite adds no marker with this run's nonce"
            elif unknown := _unbound_marker_names(code, rewritten):
                reason = f"a marker value reads names the script never binds: {sorted(unknown)}"
            else:
                return InstrumentResult(rewritten, "llm", None)
    try:
        ruled = rule_instrument(code, nonce)
    except (SyntaxError, ValueError, RecursionError, KeyError):
        return InstrumentResult(code, "none", reason)
    added = _markers_with_nonce(ruled, nonce) - _markers_with_nonce(code, nonce)
    if added <= 0 or not only_prints_added(code, ruled):
        return InstrumentResult(code, "none", reason)
    return InstrumentResult(ruled, "rules", reason)
