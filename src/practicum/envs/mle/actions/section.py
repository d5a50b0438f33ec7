"""Section mode: the reply is the modelling section of a fixed script (between the one-line
template and a whole script).

The fixed script loads train.csv and test.csv and names the target; the section (up to
`MAX_LINES` lines) must build the features, fit a model and assign `predictions` for the test
rows; the fixed tail checks `predictions` (one row per test row, the right width for class
probabilities; a clear error otherwise) and writes submission.csv. A small model fails here
often and at different depths (a wrong column name stops at the first line, a regressor on
class labels stops at the fit, predictions on the training rows stop at the tail), so the
evidence-checked milestones (`credit.evidence`) separate further progress from less.

`section_template` builds the `Template` (the marked region is the section); `parse_section`
turns a reply into the script to run. `predictions` is checked when the script runs, not at
parse time, so a section that stops short (fits a model, never predicts) still runs and earns
the milestones it proves. A reply cut off by the token budget inside its code block keeps its
longest prefix of whole lines that parses (`recover_prefix`, with `salvage`): the cut is the
budget's doing, the lines before it are the policy's.
"""

from __future__ import annotations

from practicum.envs.mle.actions.parsing import (
    ActionParseError,
    code_blocks,
    extract_code,
    syntax_problem,
)
from practicum.envs.mle.actions.sklearn_template import (
    DENSE_ONLY,
    ESTIMATORS,
    HELPERS,
    TASK_TYPES,
    validation_expr,
)
from practicum.envs.mle.actions.template import END_MARKER, START_MARKER, Template, fill_template
from practicum.pyast import parse as ast_parse

MAX_LINES = 25
"""Most non-blank lines a section may have."""
_PY_TAGS = {"python", "python3", "py", "py3", ""}

# The validation-then-refit tail both few-shot examples end with.
_FIT_AND_PREDICT = """\
X_tr, X_val, y_tr, y_val = train_test_split(X, train[TARGET], test_size=0.2, random_state=0)
model = {estimator}
model.fit(X_tr, y_tr)
print("validation {label}:", {score})
model.fit(X, train[TARGET])
predictions = {predict}
"""
_TABULAR_EXAMPLE = (
    """\
features = [c for c in train.columns if c not in (TARGET, ID_COL)]
X = train[features].fillna(0)
X_test = test[features].fillna(0)
"""
    + _FIT_AND_PREDICT
)
_TEXT_EXAMPLE = (
    """\
text = [c for c in train.columns if c not in (TARGET, ID_COL)][0]
vectorizer = TfidfVectorizer(max_features=20000, ngram_range=(1, 2))
X = vectorizer.fit_transform(train[text].fillna(""))
X_test = vectorizer.transform(test[text].fillna(""))
"""
    + _FIT_AND_PREDICT
)
_ESTIMATOR = {
    ("classification", False): "RandomForestClassifier(n_estimators=200, random_state=0)",
    ("regression", False): "RandomForestRegressor(n_estimators=200, random_state=0)",
    ("classification", True): "LogisticRegression(C=4.0, max_iter=1000)",
    ("regression", True): "Ridge(alpha=1.0)",
}
_EXTRA_IMPORTS = {
    "sklearn.model_selection": "train_test_split cross_val_score KFold StratifiedKFold",
    "sklearn.feature_extraction.text": "TfidfVectorizer CountVectorizer",
    "sklearn.impute": "SimpleImputer",
    "sklearn.metrics": "accuracy_score cohen_kappa_score f1_score log_loss mean_absolute_error "
    "mean_squared_error mean_squared_log_error r2_score roc_auc_score",
}

_CHECK_ROWS = """\
if "predictions" not in globals():
    raise SystemExit("the section never assigned `predictions` (it must end with "
                     "predictions = ..., one prediction per test row)")
predictions = np.asarray(predictions)
if predictions.ndim == 0 or len(predictions) != len(test):
    raise SystemExit(f"`predictions` must have one row per test row ({{len(test)}} rows), got "
                     f"shape {{predictions.shape}}")
submission = pd.DataFrame({{ID_COL: test[ID_COL]}})
"""
_WRITE_VALUES = """\
if predictions.ndim == 2 and predictions.shape[1] == 1:
    predictions = predictions[:, 0]
if predictions.ndim != 1:
    raise SystemExit(f"`predictions` must hold one {what} per test row, got shape "
                     f"{{predictions.shape}}")
submission[TARGET] = predictions
"""
_WRITE_PROBA = """\
if len(CLASSES) == 2:
    if predictions.ndim == 2 and predictions.shape[1] == 2:
        predictions = predictions[:, 1]
    if predictions.ndim != 1:
        raise SystemExit(f"`predictions` must hold P({{TARGET}} = {{CLASSES[1]}}) per test row, "
                         f"got shape {{predictions.shape}}")
    submission[TARGET] = predictions
else:
    if predictions.ndim != 2 or predictions.shape[1] != len(CLASSES):
        raise SystemExit(f"`predictions` must have one column per class {{CLASSES}}, got shape "
                         f"{{predictions.shape}}")
    for i, label in enumerate(CLASSES):
        submission[str(label)] = predictions[:, i]
"""


def section_template(
    task_type: str, target: str, id_col: str, metric: str, data_dir: str = "."
) -> Template:
    """The fixed script of section mode for a competition (module docstring).

    task_type as for `sklearn_template.default_template`. Metrics scored on probabilities
    (AUC, log-loss) want class probabilities in `predictions`: P(second sorted class) for two
    classes, else one column per class in sorted order (`CLASSES`).
    """
    key = task_type.strip().lower().replace("-", "_")
    if key not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; expected one of {sorted(TASK_TYPES)}")
    kind, text = TASK_TYPES[key]
    modules = {**ESTIMATORS[kind], **HELPERS, **_EXTRA_IMPORTS}
    imports = {
        mod: [n for n in names.split() if not (text and n in DENSE_ONLY)]
        for mod, names in modules.items()
    }
    available = ("np", "pd", *(n for names in imports.values() for n in names))
    import_lines = "\n".join(
        f"from {mod} import {', '.join(names)}" for mod, names in imports.items() if names
    )
    score, proba, label = validation_expr(metric, kind)
    classify = kind == "classification"
    if proba and key == "binary":
        what = (
            f"the probability that {target} is CLASSES[1] (the second of the two sorted "
            f"classes) for each test row, e.g. model.predict_proba(X_test)[:, 1]"
        )
        predict = "model.predict_proba(X_test)[:, 1]"
        if label == "auc":
            score = "roc_auc_score(y_val, model.predict_proba(X_val)[:, 1])"
    elif proba:
        what = (
            "class probabilities, one column per class of CLASSES (sorted), e.g. "
            "model.predict_proba(X_test)"
        )
        predict = "model.predict_proba(X_test)"
    else:
        noun = "class label" if classify else "number"
        what = f"one predicted {noun} per test row, e.g. model.predict(X_test)"
        predict = "model.predict(X_test)"
    write = (
        _WRITE_PROBA.format()
        if proba
        else _WRITE_VALUES.format(what="class label" if classify else "number")
    )
    example = (
        (_TEXT_EXAMPLE if text else _TABULAR_EXAMPLE)
        .format(estimator=_ESTIMATOR[kind, text], label=label, score=score, predict=predict)
        .rstrip()
    )
    classes = "CLASSES = sorted(train[TARGET].unique())\n" if classify else ""
    script = f'''\
"""Fixed script: load the data, run the modelling section, check it, write submission.csv."""
import numpy as np
import pandas as pd
{import_lines}

DATA_DIR = {data_dir!r}
TARGET = {target!r}
ID_COL = {id_col!r}

train = pd.read_csv(DATA_DIR + "/train.csv")
test = pd.read_csv(DATA_DIR + "/test.csv")
{classes}
{START_MARKER}
{example}
{END_MARKER}

{_CHECK_ROWS.format()}{write}submission.to_csv("submission.csv", index=False)
print("wrote submission.csv with", len(submission), "rows")
'''
    instruction = (
        f"build features from `train` and `test`, fit a model on the training rows, "
        f"print a validation {label}, and assign `predictions`: {what}"
    )
    return Template(
        script=script,
        instruction=instruction,
        required_names=(),
        available=available,
        example=example,
        max_lines=MAX_LINES,
    )


def recover_prefix(code: str, max_lines: int) -> str | None:
    """The longest prefix of whole lines of `code`, with at most `max_lines` non-blank lines,
    that parses and holds a statement; None when there is none."""
    lines = code.splitlines()
    kept, count = [], 0
    for line in lines:
        count += bool(line.strip())
        if count > max_lines:
            break
        kept.append(line)
    for end in range(len(kept), 0, -1):
        prefix = "\n".join(kept[:end]).rstrip()
        if syntax_problem(prefix) is None and ast_parse(prefix).body:
            return prefix
    return None


def parse_section(reply: str, template: Template, salvage: bool = True) -> tuple[str, str]:
    """(script to run, the section as written) of a section-mode reply; raises
    ActionParseError with what to fix. With `salvage`, a code block cut off by the end of the
    reply keeps its longest parsing prefix (module docstring)."""
    try:
        return fill_template(template, reply), extract_code(reply)
    except ActionParseError as err:
        if not salvage or template.start_marker in reply or "YOUR CODE" in reply:
            raise
        cut = [b for b in code_blocks(reply) if not b.closed and b.lang in _PY_TAGS]
        closed = [b for b in code_blocks(reply) if b.closed and b.lang in _PY_TAGS]
        if not cut or closed:
            raise
        code = recover_prefix(cut[-1].code, template.max_lines)
        if code is None:
            raise ActionParseError(
                "the ```python block is cut off (not closed with ```) and "
                "no complete statement comes before the cut"
            ) from err
        return fill_template(template, code), code
