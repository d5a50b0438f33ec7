"""Prompts for the ML-engineering agent: one short system prompt and the from-scratch task prompt.

Small models have small contexts, so prompts stay short: template mode stays under ~600
tokens (the competition description is cut to `max_description_chars`). The improvement
prompt lives in `self_improve.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from practicum.envs.mle.actions.template import Template

SYSTEM_PROMPT = (
    "You are a machine-learning engineer solving Kaggle-style competitions. You write one Python "
    "script that trains a model on the training data and writes test-set predictions to "
    "submission.csv. Scripts run on a CPU with a time limit, without internet."
)

_SCRIPT_EXAMPLE = """\
I will one-hot encode the categorical columns, fit a random forest, check accuracy on a 20% \
hold-out split, then refit on all rows and predict the test set.
```python
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
X = pd.get_dummies(train.drop(columns=["id", "target"])).fillna(0)
X_test = pd.get_dummies(test.drop(columns=["id"])).reindex(columns=X.columns, fill_value=0)
X_tr, X_val, y_tr, y_val = train_test_split(X, train["target"], test_size=0.2, random_state=0)
model = RandomForestClassifier(n_estimators=300, random_state=0).fit(X_tr, y_tr)
print("validation accuracy:", model.score(X_val, y_val))
model.fit(X, train["target"])
submission = pd.DataFrame({"id": test["id"], "target": model.predict(X_test)})
submission.to_csv("submission.csv", index=False)
```"""


def _cut(text: str, max_chars: int | None) -> str:
    text = text.strip()
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[:max_chars].rsplit(" ", 1)[0] + " [...]"


def _files(data_files: Sequence[str] | Mapping[str, str]) -> str:
    if isinstance(data_files, Mapping):
        return "\n".join(
            f"- {name}: {about}" if about else f"- {name}" for name, about in data_files.items()
        )
    return "\n".join(f"- {name}" for name in data_files)


def scratch_prompt(
    competition_description: str,
    data_files: Sequence[str] | Mapping[str, str],
    mode: Literal["script", "template"] = "script",
    template: Template | None = None,
    max_description_chars: int | None = None,
) -> str:
    """The "solve from scratch" prompt: task, data files, what to reply, an example reply.

    data_files: file names, or name -> one-line description. In template mode `template` is
    required; the description is cut to 1200 characters unless `max_description_chars` says.
    """
    if mode == "script":
        description = _cut(competition_description, max_description_chars)
        return (
            f"{description}\n\nData files (in the working directory):\n{_files(data_files)}\n\n"
            "Write a Python script that trains a model and writes predictions for test.csv to "
            "submission.csv, in the format of the sample submission. Use pandas, numpy and "
            "scikit-learn; keep it fast; print the validation score.\n\n"
            "Reply with a short plan (2-4 sentences), then the whole script in one ```python "
            f"block. Example reply:\n\n{_SCRIPT_EXAMPLE}"
        )
    if mode != "template":
        raise ValueError(f"prompt mode must be 'script' or 'template', got {mode!r}")
    if template is None:
        raise ValueError("template mode needs a template (see sklearn_template.default_template)")
    description = _cut(
        competition_description, 1200 if max_description_chars is None else max_description_chars
    )
    return (
        f"{description}\n\nData files:\n{_files(data_files)}\n\n"
        "A fixed script loads the data, builds the features X, then runs your code, fits `model`, "
        "reports a validation score and writes submission.csv.\n"
        f"Your task: {template.instruction}.\n"
        f"Already imported: {', '.join(template.available)}.\n"
        f"Reply with only your code (at most {template.max_lines} lines) in one ```python block. "
        f"Example reply:\n```python\n{template.example}\n```"
    )


# -------------------------------------------------------------- compact template prompt

_LINE_EXAMPLES = {
    "classification": (
        "model = RandomForestClassifier(n_estimators=100)",
        "model = LogisticRegression(max_iter=1000)",
        "model = KNeighborsClassifier(n_neighbors=5)",
    ),
    "regression": (
        "model = RandomForestRegressor(n_estimators=100)",
        "model = Ridge(alpha=1.0)",
        "model = KNeighborsRegressor(n_neighbors=5)",
    ),
}


def line_examples(kind: Literal["classification", "regression"]) -> tuple[str, ...]:
    """The example lines `line_prompt` shows for a competition of this kind."""
    return _LINE_EXAMPLES[kind]


LINE_SYSTEM_PROMPT = "You write one line of Python that picks a scikit-learn model."
"""System prompt of `line_prompt`: small models follow one short instruction best."""
LINE_REPLY = "Reply with only one line of Python that starts with `model = `."

LINE_EXAMPLE_MESSAGES = (
    {
        "role": "user",
        "content": "Competition: Penguins. Predict the species of a penguin from "
        "its measurements.\nMetric: accuracy (higher is better).\nChoose an estimator. "
        + LINE_REPLY,
    },
    {"role": "assistant", "content": "model = RandomForestClassifier(n_estimators=200)"},
    {
        "role": "user",
        "content": "Competition: House prices. Predict the sale price of a "
        "house.\nMetric: rmse (lower is better).\nChoose an estimator. " + LINE_REPLY,
    },
    {"role": "assistant", "content": "model = Ridge(alpha=1.0)"},
)
"""Few-shot chat turns placed before `line_prompt` (competitions outside the suite). Measured
on SmolLM2-135M-Instruct over 4 competitions x 16 samples: replies that fill the region rose
from 8/64 to 38/64 at temperature 1.0 (14/64 -> 54/64 at 0.7)."""


def task_summary(competition_description: str, max_chars: int = 200) -> str:
    """The first paragraph of the description's `## Task` section (else its first paragraph),
    on one line, cut to about `max_chars`."""
    text = competition_description.strip()
    start = text.find("## Task")
    if start >= 0:
        text = text[start + len("## Task") :]
    paragraphs = [p for p in text.split("\n\n") if p.strip() and not p.lstrip().startswith("#")]
    first = " ".join((paragraphs[0] if paragraphs else "").split())
    return _cut(first, max_chars)


def line_prompt(
    name: str,
    summary: str,
    metric: str,
    lower_is_better: bool,
    template: Template,
    kind: Literal["classification", "regression"],
) -> str:
    """Template-mode prompt for very small models (~230 tokens with SmolLM2's tokenizer).

    The reply is one line `model = Estimator(...)`; three example lines name real estimators,
    and the instruction comes last, where a 135M-parameter model still follows it. Use it with
    `LINE_EXAMPLE_MESSAGES` as few-shot turns: about 60% of SmolLM2-135M's replies at
    temperature 1.0 then fill the region (with `template.salvage_region`), and fewer run
    correctly (classifier/regressor mix-ups), so RL has reward variance to work with.
    """
    names = [
        n
        for n in template.available
        if n not in ("make_pipeline", "StandardScaler", "MaxAbsScaler")
    ]
    examples = "\n".join(line_examples(kind))
    direction = "lower" if lower_is_better else "higher"
    return (
        f"Competition: {name}. {summary}\nMetric: {metric} ({direction} is better).\n"
        f"Available estimators: {', '.join(names)}.\n\n"
        f"Choose an estimator. {LINE_REPLY[:-1]}, like one of these:\n{examples}"
    )


# -------------------------------------------------------------- section-mode prompt

SECTION_SYSTEM_PROMPT = (
    "You write the modelling section of a Python script: features, a "
    "scikit-learn model, a validation score and test predictions."
)
"""System prompt of `section_prompt`."""
SECTION_REPLY = (
    "Reply with only the code of the section in one ```python block (no imports, "
    "no reading or writing files)."
)
MAX_COLUMNS_SHOWN = 24


def _columns(columns: Sequence[str]) -> str:
    shown = list(columns[:MAX_COLUMNS_SHOWN])
    more = len(columns) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more)" if more > 0 else "")


def section_prompt(
    name: str,
    summary: str,
    metric: str,
    lower_is_better: bool,
    template: Template,
    train_columns: Sequence[str],
    train_rows: int,
    test_rows: int,
    target: str,
    id_col: str,
    estimators: Sequence[str] = (),
) -> str:
    """Section-mode prompt (`actions.section`): what the fixed script has already done, the
    column names (a wrong one is the commonest failure), what `predictions` must hold, and
    the reply format. Use it after `section_examples()` as few-shot turns."""
    direction = "lower" if lower_is_better else "higher"
    estimators = list(estimators) or [
        n
        for n in template.available
        if n[0].isupper()
        and n.endswith(
            (
                "Classifier",
                "Regressor",
                "Regression",
                "SVC",
                "SVR",
                "NB",
                "Ridge",
                "Lasso",
                "ElasticNet",
            )
        )
    ]
    classes = "CLASSES (sorted class labels), " if "CLASSES" in template.script else ""
    return (
        f"Competition: {name}. {summary}\nMetric: {metric} ({direction} is better).\n"
        f"The script has already run:\n"
        f'    train = pd.read_csv("train.csv")  # {train_rows} rows; columns: '
        f"{_columns(train_columns)}\n"
        f'    test = pd.read_csv("test.csv")    # {test_rows} rows; the same columns '
        f"without {target}\n"
        f"    TARGET = {target!r}; ID_COL = {id_col!r}\n"
        f"Available: np, pd, {classes}train_test_split, the metrics of sklearn.metrics and "
        f"{', '.join(estimators)}.\n\n"
        f"Write the modelling section (at most {template.max_lines} lines): "
        f"{template.instruction}. {SECTION_REPLY}"
    )


def section_examples() -> list[dict[str, str]]:
    """One few-shot exchange (a made-up regression competition, named columns) placed before
    `section_prompt`: the reply shows the shape of a section without fitting any bundled
    competition's columns."""
    from practicum.envs.mle.actions.section import section_template

    template = section_template("regression", "price", "id", "rmse")
    prompt = section_prompt(
        "House prices",
        "Predict the sale price of a house.",
        "rmse",
        True,
        template,
        ["id", "sqft", "rooms", "age", "price"],
        800,
        200,
        "price",
        "id",
        ["Ridge", "RandomForestRegressor"],
    )
    reply = (
        "```python\n"
        'X = train[["sqft", "rooms", "age"]].fillna(0)\n'
        'X_test = test[["sqft", "rooms", "age"]].fillna(0)\n'
        "X_tr, X_val, y_tr, y_val = train_test_split(X, train[TARGET], test_size=0.2, "
        "random_state=0)\n"
        "model = Ridge(alpha=1.0)\n"
        "model.fit(X_tr, y_tr)\n"
        'print("validation rmse:", mean_squared_error(y_val, model.predict(X_val)) ** 0.5)\n'
        "model.fit(X, train[TARGET])\n"
        "predictions = model.predict(X_test)\n"
        "```"
    )
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
