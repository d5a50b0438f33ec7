"""The default template (`default_template`): a scikit-learn pipeline for tabular or text
competitions, whose region assigns `model`."""

from __future__ import annotations

from practicum.envs.mle.actions.template import END_MARKER, START_MARKER, Template

ESTIMATORS = {  # kind -> module -> estimator names imported for the region
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
HELPERS = {
    "sklearn.pipeline": "make_pipeline",
    "sklearn.preprocessing": "StandardScaler MaxAbsScaler",
}
# TF-IDF features are sparse: drop estimators that need dense input.
DENSE_ONLY = set(
    "HistGradientBoostingClassifier HistGradientBoostingRegressor GaussianNB StandardScaler "
    "GradientBoostingClassifier GradientBoostingRegressor".split()
)
_EXAMPLES = {  # (kind, text) -> a good region body
    ("classification", False): "model = RandomForestClassifier(n_estimators=200, random_state=0)",
    ("regression", False): "model = RandomForestRegressor(n_estimators=200, random_state=0)",
    ("classification", True): "model = LogisticRegression(C=4.0, max_iter=1000)",
    ("regression", True): "model = Ridge(alpha=1.0)",
}
TASK_TYPES = {
    "classification": ("classification", False),
    "binary": ("classification", False),
    "multiclass": ("classification", False),
    "regression": ("regression", False),
    "text_classification": ("classification", True),
    "text": ("classification", True),
    "text_regression": ("regression", True),
}


def validation_expr(metric: str, kind: str) -> tuple[str, bool, str]:
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
    if key not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; expected one of {sorted(TASK_TYPES)}")
    kind, text = TASK_TYPES[key]
    estimators = {
        mod: [n for n in names.split() if not (text and n in DENSE_ONLY)]
        for mod, names in {**ESTIMATORS[kind], **HELPERS}.items()
    }
    available = tuple(n for names in estimators.values() for n in names)
    imports = "\n".join(
        f"from {mod} import {', '.join(names)}" for mod, names in estimators.items() if names
    )
    score_expr, needs_proba, label = validation_expr(metric, kind)
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
from sklearn.metrics import (accuracy_score, cohen_kappa_score, f1_score, log_loss,
                             mean_absolute_error, mean_squared_error, mean_squared_log_error,
                             r2_score, roc_auc_score)
from sklearn.model_selection import train_test_split
{imports}

DATA_DIR = {data_dir!r}
TARGET = {target!r}
ID_COL = {id_col!r}

train = pd.read_csv(DATA_DIR + "/train.csv")
test = pd.read_csv(DATA_DIR + "/test.csv")
y = train[TARGET]
{_TEXT_FEATURES if text else _TABULAR_FEATURES}X_train, X_val, y_train, y_val = train_test_split(
    X, y, test_size=0.2, random_state=0, {split})

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
