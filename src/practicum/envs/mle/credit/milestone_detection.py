"""Which milestones a statement reaches: name and call heuristics over the agent's AST.

Used by the rule-based inserter (`rule_instrumenter`): loaders mean data_loaded, estimator
constructors mean model_built, `.fit` means model_trained, a scorer assigned to a name (or
printed directly, then without a value) means validation_scored, and so on.
"""

from __future__ import annotations

import ast
import re

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
_NUMERIC_WRAPPERS = {"sqrt", "mean", "float", "round", "abs", "exp", "log", "min", "max", "item"}


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


def milestones_of(stmt: ast.stmt) -> list[tuple[str, str | None]]:
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
    elif (
        isinstance(stmt, ast.Expr)
        and isinstance(value, ast.Call)
        and _call_name(value) == "print"
        and names & _SCORERS
    ):
        found.append(("validation_scored", None))  # print("acc", accuracy_score(...)): no value
    writes = [c for c in calls if _writes(c)]
    if any("submission" in ast.unparse(c).lower() or "sub" in _receiver(c).lower() for c in writes):
        found.append(("predictions_written", None))
    return found
