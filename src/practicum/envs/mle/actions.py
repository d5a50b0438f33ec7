"""Parsing the policy's reply into something runnable.

Script mode (arXiv 2509.01684): a short natural-language plan, then exactly one ```python block
that writes submission.csv. Template mode (for small models): the reply fills ONE marked
region of a fixed, working script (`Template`, `fill_template`, `default_template`).

Every failure raises `ActionParseError` whose message is short enough to show the model as
its observation.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

_PY_TAGS = {"python", "python3", "py", "py3"}
_OPEN = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*([\w+.-]*)[ \t]*$")


class ActionParseError(ValueError):
    """The reply cannot be turned into code; `str(err)` is the observation for the model."""


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a reply."""

    lang: str
    """Lowercased info string after the opening fence ("" when untagged)."""
    code: str
    """Block content, dedented."""
    start: int
    """Offset in the reply where the opening fence begins."""
    closed: bool
    """False when the reply ended inside the block (generation cut off)."""


@dataclass(frozen=True)
class ScriptAction:
    """A parsed script-mode reply."""

    plan: str
    """Text before the code block, stripped (may be empty)."""
    code: str
    """The Python source to run."""


def code_blocks(reply: str) -> list[CodeBlock]:
    """All fenced blocks of `reply`, in order (``` fences, optional language tag)."""
    blocks: list[CodeBlock] = []
    lines = reply.replace("\r\n", "\n").split("\n")
    offset, i = 0, 0
    offsets = []
    for line in lines:
        offsets.append(offset)
        offset += len(line) + 1
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.group(1), opening.group(2).lower()
        body: list[str] = []
        closed = False
        j = i + 1
        while j < len(lines):
            line = lines[j]
            bare = line.strip()
            if bare and set(bare) == {"`"} and len(bare) >= len(fence):
                closed = True
                break
            if bare.endswith(fence) and not bare.startswith("`"):
                body.append(line.rstrip()[: -len(fence)])  # `print(x)```: fence glued to code
                closed = True
                break
            body.append(line)
            j += 1
        blocks.append(
            CodeBlock(lang, textwrap.dedent("\n".join(body)).strip("\n"), offsets[i], closed)
        )
        i = j + 1
    return blocks


def syntax_problem(code: str) -> str | None:
    """None when `code` parses, else a one-line description of the first syntax error."""
    try:
        ast.parse(code)
    except SyntaxError as err:
        return f"SyntaxError line {err.lineno}: {err.msg}"
    except ValueError as err:  # e.g. null bytes
        return f"ValueError: {err}"
    return None


def _python_block(reply: str) -> CodeBlock:
    """The single Python block of a reply (tagged python, or untagged and parsing)."""
    blocks = code_blocks(reply)
    unclosed = [b for b in blocks if not b.closed and (b.lang in _PY_TAGS or not b.lang)]
    tagged = [b for b in blocks if b.lang in _PY_TAGS]
    if not tagged:
        untagged = [b for b in blocks if not b.lang]
        parsing = [b for b in untagged if syntax_problem(b.code) is None]
        tagged = parsing if len(untagged) > 1 and parsing else untagged
    if not tagged:
        raise ActionParseError("no ```python code block found")
    if len(tagged) > 1:
        raise ActionParseError(f"{len(tagged)} code blocks found; send exactly one")
    block = tagged[0]
    if block in unclosed:
        raise ActionParseError("the ```python block is not closed with ``` (reply cut off?)")
    if not block.code.strip():
        raise ActionParseError("the code block is empty")
    return block


def parse_script_action(reply: str) -> ScriptAction:
    """Split a script-mode reply into plan and code; the code must parse."""
    block = _python_block(reply)
    problem = syntax_problem(block.code)
    if problem:
        raise ActionParseError(f"code does not parse: {problem}")
    plan = reply.replace("\r\n", "\n")[: block.start].strip()
    return ScriptAction(plan=plan, code=block.code + "\n")


def extract_code(reply: str) -> str:
    """The code of a reply: its single Python block, or the whole reply when it is bare Python."""
    if "```" not in reply:
        bare = textwrap.dedent(reply.replace("\r\n", "\n")).strip("\n")
        if not bare.strip():
            raise ActionParseError("the reply is empty")
        problem = syntax_problem(bare)
        if problem:
            raise ActionParseError(
                f"no ```python code block found and the reply does not parse: {problem}"
            )
        return bare
    code = _python_block(reply).code
    problem = syntax_problem(code)
    if problem:
        raise ActionParseError(f"code does not parse: {problem}")
    return code


# ---------------------------------------------------------------- template mode

START_MARKER = "# === YOUR CODE START ==="
END_MARKER = "# === YOUR CODE END ==="


@dataclass(frozen=True)
class Template:
    """A complete, working script with one region the policy fills."""

    script: str
    """Full script text; the region is the lines strictly between the two marker lines."""
    instruction: str
    """What the region must do, told to the model (e.g. "assign a scikit-learn estimator to
    `model`")."""
    required_names: tuple[str, ...] = ("model",)
    """Names the region must assign; a reply that does not is rejected before running."""
    available: tuple[str, ...] = ()
    """Names already imported when the region runs (listed in the prompt)."""
    example: str = "model = RandomForestClassifier(n_estimators=200, random_state=0)"
    """A good region body, shown in the prompt as the reply format."""
    max_lines: int = 12
    """Most non-blank lines the region may have."""
    start_marker: str = START_MARKER
    end_marker: str = END_MARKER

    def __post_init__(self) -> None:
        lines = [line.strip() for line in self.script.splitlines()]
        for marker in (self.start_marker, self.end_marker):
            if lines.count(marker) != 1:
                raise ValueError(f"template script must contain the line {marker!r} exactly once")
        if lines.index(self.start_marker) > lines.index(self.end_marker):
            raise ValueError("template script: the start marker must come before the end marker")


def fill_template(template: Template, reply: str) -> str:
    """The template's script with its region replaced by the reply's code (re-indented)."""
    for marker in (template.start_marker, template.end_marker, "YOUR CODE START", "YOUR CODE END"):
        if marker in reply:
            raise ActionParseError(
                "do not include the marker lines; send only the code of the region"
            )
    code = extract_code(reply)
    n_lines = sum(1 for line in code.splitlines() if line.strip())
    if n_lines > template.max_lines:
        raise ActionParseError(
            f"the code has {n_lines} lines; at most {template.max_lines} allowed"
        )
    assigned = _assigned_names(ast.parse(code))
    missing = [name for name in template.required_names if name not in assigned]
    if missing:
        raise ActionParseError("the code must assign " + ", ".join(f"`{n}`" for n in missing))
    lines = template.script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == template.start_marker)
    end = next(i for i, line in enumerate(lines) if line.strip() == template.end_marker)
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    region = textwrap.indent(code, indent).splitlines()
    script = "\n".join(lines[: start + 1] + region + lines[end:]) + "\n"
    problem = syntax_problem(script)
    if problem:
        raise ActionParseError(f"the filled script does not parse: {problem}")
    return script


def _assigned_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


_ESTIMATORS = {  # kind -> module -> estimator names imported for the region
    "classification": {
        "sklearn.linear_model": "LogisticRegression RidgeClassifier SGDClassifier",
        "sklearn.ensemble": "RandomForestClassifier ExtraTreesClassifier "
        "GradientBoostingClassifier HistGradientBoostingClassifier",
        "sklearn.svm": "SVC LinearSVC",
        "sklearn.neighbors": "KNeighborsClassifier",
        "sklearn.naive_bayes": "GaussianNB MultinomialNB",
        "sklearn.tree": "DecisionTreeClassifier",
        "sklearn.neural_network": "MLPClassifier",
    },
    "regression": {
        "sklearn.linear_model": "LinearRegression Ridge Lasso ElasticNet SGDRegressor",
        "sklearn.ensemble": "RandomForestRegressor ExtraTreesRegressor "
        "GradientBoostingRegressor HistGradientBoostingRegressor",
        "sklearn.svm": "SVR LinearSVR",
        "sklearn.neighbors": "KNeighborsRegressor",
        "sklearn.tree": "DecisionTreeRegressor",
        "sklearn.neural_network": "MLPRegressor",
    },
}
_HELPERS = {
    "sklearn.pipeline": "make_pipeline",
    "sklearn.preprocessing": "StandardScaler MaxAbsScaler",
}
# TF-IDF features are sparse: drop estimators that need dense input.
_DENSE_ONLY = set(
    "HistGradientBoostingClassifier HistGradientBoostingRegressor GaussianNB StandardScaler "
    "GradientBoostingClassifier GradientBoostingRegressor".split()
)
_EXAMPLES = {  # (kind, text) -> a good region body
    ("classification", False): "model = RandomForestClassifier(n_estimators=200, random_state=0)",
    ("regression", False): "model = RandomForestRegressor(n_estimators=200, random_state=0)",
    ("classification", True): "model = LogisticRegression(C=4.0, max_iter=1000)",
    ("regression", True): "model = Ridge(alpha=1.0)",
}
_TASK_TYPES = {
    "classification": ("classification", False),
    "binary": ("classification", False),
    "multiclass": ("classification", False),
    "regression": ("regression", False),
    "text_classification": ("classification", True),
    "text": ("classification", True),
    "text_regression": ("regression", True),
}


def _validation_expr(metric: str, kind: str) -> tuple[str, bool, str]:
    """(score expression over y_val and model predictions, needs probabilities, metric label)."""
    m = metric.lower().replace("-", "_").replace(" ", "_")
    proba = "model.predict_proba(X_val)"
    if kind == "classification":
        if "auc" in m or "auroc" in m:
            return (
                f"roc_auc_score(y_val, {proba}[:, 1]) if len(model.classes_) == 2 else "
                f"roc_auc_score(y_val, {proba}, multi_class='ovr', labels=model.classes_)",
                True,
                "auc",
            )
        if "logloss" in m or ("log" in m and "loss" in m) or "cross_entropy" in m:
            return f"log_loss(y_val, {proba}, labels=model.classes_)", True, "log_loss"
        if "f1" in m:
            return "f1_score(y_val, model.predict(X_val), average='macro')", False, "macro_f1"
        if "kappa" in m:
            return (
                "cohen_kappa_score(y_val, model.predict(X_val), weights='quadratic')",
                False,
                "qwk",
            )
        return "accuracy_score(y_val, model.predict(X_val))", False, "accuracy"
    if "rmsle" in m or "squared_log" in m:
        return (
            "np.sqrt(mean_squared_log_error(y_val, np.clip(model.predict(X_val), 0, None)))",
            False,
            "rmsle",
        )
    if m in ("mse", "mean_squared_error"):
        return "mean_squared_error(y_val, model.predict(X_val))", False, "mse"
    if "mae" in m or "absolute" in m:
        return "mean_absolute_error(y_val, model.predict(X_val))", False, "mae"
    if m in ("r2", "r2_score", "r_squared"):
        return "r2_score(y_val, model.predict(X_val))", False, "r2"
    return "np.sqrt(mean_squared_error(y_val, model.predict(X_val)))", False, "rmse"


_TABULAR_FEATURES = """\
features = [c for c in train.columns if c not in (TARGET, ID_COL) and c in test.columns]
both = pd.concat([train[features], test[features]], keys=["train", "test"])
numeric = [c for c in features if pd.api.types.is_numeric_dtype(both[c])]
categorical = [c for c in features if c not in numeric and both[c].nunique() <= 30]
both = pd.get_dummies(both[numeric + categorical], columns=categorical, dtype=float).astype(float)
both = both.fillna(both.median()).fillna(0.0)
X = both.loc["train"].to_numpy()
X_test = both.loc["test"].to_numpy()
"""
_TEXT_FEATURES = """\
features = [c for c in train.columns if c not in (TARGET, ID_COL) and c in test.columns]
text_col = max(features, key=lambda c: train[c].astype(str).str.len().mean())
vectorizer = TfidfVectorizer(max_features=20000, ngram_range=(1, 2), sublinear_tf=True)
X = vectorizer.fit_transform(train[text_col].fillna("").astype(str))
X_test = vectorizer.transform(test[text_col].fillna("").astype(str))
"""


def default_template(
    task_type: str, target: str, id_col: str, metric: str, data_dir: str = "."
) -> Template:
    """A tabular (or TF-IDF text) pipeline whose region assigns a scikit-learn `model`.

    task_type: classification | binary | multiclass | regression | text_classification (text)
    | text_regression ("-" works for "_"). The fixed script reads {data_dir}/train.csv and
    test.csv, builds X and an 80/20 split, runs the region, fits, prints the validation
    `metric`, refits on all rows and writes submission.csv: class probabilities for AUC and
    log-loss metrics (binary: the `target` column holds P(second sorted class); multiclass:
    one column per class), else predictions in the `target` column.
    """
    key = task_type.strip().lower().replace("-", "_")
    if key not in _TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; expected one of {sorted(_TASK_TYPES)}")
    kind, text = _TASK_TYPES[key]
    estimators = {
        mod: [n for n in names.split() if not (text and n in _DENSE_ONLY)]
        for mod, names in {**_ESTIMATORS[kind], **_HELPERS}.items()
    }
    available = tuple(n for names in estimators.values() for n in names)
    imports = "\n".join(
        f"from {mod} import {', '.join(names)}" for mod, names in estimators.items() if names
    )
    score_expr, needs_proba, label = _validation_expr(metric, kind)
    classify = kind == "classification"
    split = "stratify=y if y.value_counts().min() >= 2 else None" if classify else "stratify=None"
    if needs_proba:
        calibrate = (
            'if not hasattr(model, "predict_proba"):\n'
            "    model = CalibratedClassifierCV(model, cv=3)\n"
        )
        write = (
            "proba = model.predict_proba(X_test)\n"
            "if len(model.classes_) == 2:\n"
            "    submission[TARGET] = proba[:, 1]\n"
            "else:\n"
            "    for i, label in enumerate(model.classes_):\n"
            "        submission[str(label)] = proba[:, i]\n"
        )
    else:
        calibrate = ""
        write = "submission[TARGET] = model.predict(X_test)\n"
    example = _EXAMPLES[kind, text]
    script = f'''\
"""Fixed pipeline: load data, build features, fit `model`, validate, write submission.csv."""
import numpy as np
import pandas as pd
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import (accuracy_score, cohen_kappa_score, f1_score, log_loss, mean_absolute_error,
                             mean_squared_error, mean_squared_log_error, r2_score, roc_auc_score)
from sklearn.model_selection import train_test_split
{imports}

DATA_DIR = {data_dir!r}
TARGET = {target!r}
ID_COL = {id_col!r}

train = pd.read_csv(DATA_DIR + "/train.csv")
test = pd.read_csv(DATA_DIR + "/test.csv")
y = train[TARGET]
{_TEXT_FEATURES if text else _TABULAR_FEATURES}X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=0, {split})

{START_MARKER}
{example}
{END_MARKER}

{calibrate}model.fit(X_train, y_train)
score = {score_expr}
print(f"validation {label}: {{score:.5f}}")
model.fit(X, y)
submission = pd.DataFrame({{ID_COL: test[ID_COL]}})
{write}submission.to_csv("submission.csv", index=False)
print("wrote submission.csv with", len(submission), "rows")
'''
    instruction = (
        "assign a scikit-learn estimator to `model` (one or a few lines); the script fits it on "
        f"{'TF-IDF features of the text' if text else 'the numeric and one-hot features'} "
        f"and reports validation {label}"
    )
    return Template(script=script, instruction=instruction, available=available, example=example)


_ASSIGN_LINE = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*[^\n`]*")


def salvage_region(reply: str, required: tuple[str, ...] = ("model",)) -> str | None:
    """Leniency for small models in template mode: the first single line of the reply that
    assigns the required name (e.g. `model = Ridge()`) and parses on its own, wherever it
    stands (after prose, inside inline backticks, in an unclosed block); None when none does.

    Used only after `fill_template` rejected the reply as a whole.
    """
    if len(required) != 1:
        return None
    for match in _ASSIGN_LINE.finditer(reply):
        if match.group(1) != required[0]:
            continue
        line = match.group(0).rstrip()
        if syntax_problem(line) is None:
            return line
    return None
