import ast
import re

import numpy as np
import pandas as pd
import pytest

from practicum.engine.service import Completion
from practicum.envs.mle.actions.sklearn_template import default_template
from practicum.envs.mle.actions.template import fill_template
from practicum.envs.mle.credit.instrument import LLMInstrumenter, instrument
from practicum.envs.mle.credit.marker_checks import only_prints_added
from practicum.envs.mle.credit.milestones import (
    MILESTONES,
    marker_line,
    parse_milestones,
    redact_markers,
)
from practicum.envs.mle.credit.rule_instrumenter import rule_instrument

NONCE = "5eed0123abcd4567"
FENCE = "```"
ALL = list(MILESTONES)

AIDE_STYLE = """\
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split

# Load the data
train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")

features = [c for c in train.columns if c not in ("id", "target")]
X = train[features].fillna(0)
y = train["target"]
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=42)

model = RandomForestClassifier(n_estimators=30, max_depth=5, random_state=42)
model.fit(X_train, y_train)
val_acc = accuracy_score(y_val, model.predict(X_val))
print(f"Validation accuracy: {val_acc:.4f}")

model.fit(X, y)
preds = model.predict(test[features].fillna(0))
submission = pd.DataFrame({"id": test["id"], "target": preds})
submission.to_csv("submission.csv", index=False)
"""

FUNCTIONS_AND_MAIN = '''\
"""Logistic regression with scaling, 3-fold CV."""
from __future__ import annotations

import csv

import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def load_data(path):
    df = pd.read_csv(path)
    return df


def build_model(C=1.0):
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=200))


def main():
    train = load_data("train.csv")
    test = load_data("test.csv")
    X, y = train[["a", "b"]].fillna(0), train["target"]
    clf = build_model(C=0.5)
    scores = cross_val_score(clf, X, y, cv=3)
    print("cv accuracy", round(scores.mean(), 4))
    clf.fit(X, y)
    preds = clf.predict(test[["a", "b"]].fillna(0))
    with open("submission.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "target"])
        for i, p in zip(test["id"], preds):
            writer.writerow([i, p])


if __name__ == "__main__":
    main()
'''

ONE_LINERS_AND_TRY = """\
import os
import numpy as np, pandas as pd
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.metrics import mean_squared_error

DATA = "."
OUT = os.path.join(DATA, "submission.csv")
try:
    train = pd.read_csv(os.path.join(DATA, "train.csv"))
except FileNotFoundError:
    raise SystemExit("no data")
test = pd.read_csv(os.path.join(DATA, "test.csv"))
cols = ["a", "b"]; train[cols] = train[cols].fillna(0); test[cols] = test[cols].fillna(0)
n_val = len(train) // 5
reg = GradientBoostingRegressor(n_estimators=40, learning_rate=0.1, random_state=0)
if len(train) > 10: reg.fit(train[cols][n_val:], train["target"][n_val:])
rmse = np.sqrt(mean_squared_error(train["target"][:n_val], reg.predict(train[cols][:n_val])))
print("val rmse", round(rmse, 4))
sub = test[["id"]].copy()
sub["target"] = reg.predict(test[cols])
sub.to_csv(OUT, index=False)"""  # no final newline on purpose

TEXT_CV = """\
import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
vectorizer = TfidfVectorizer(ngram_range=(1, 2))
X = vectorizer.fit_transform(train["text"])
X_test = vectorizer.transform(test["text"])
y = train["target"].values

oof = np.zeros(len(train))
folds = StratifiedKFold(n_splits=3, shuffle=True, random_state=0)
for fold, (tr, va) in enumerate(folds.split(X, y)):
    model = LogisticRegression(C=2.0, max_iter=300)
    model.fit(X[tr], y[tr])
    oof[va] = model.predict_proba(X[va])[:, 1]
auc = roc_auc_score(y, oof)
print(f"OOF AUC: {auc:.4f}")

final = LogisticRegression(C=2.0, max_iter=300).fit(X, y)
submission = pd.DataFrame({"id": test["id"], "target": final.predict_proba(X_test)[:, 1]})
submission.to_csv("submission.csv", index=False)
"""

FORGER = """\
print("[[PRACTICUM:0000000000000000:model_trained]]")
print("[[PRACTICUM:%s:predictions_written]] value=1.0" % "abcdef0123456789")
"""

SCRIPTS = {  # name -> (code, data kind, milestones the instrumented run must print)
    "aide_style": (AIDE_STYLE, "binary", ALL),
    "functions_and_main": (
        FUNCTIONS_AND_MAIN,
        "binary",  # cross-validated before the final fit
        ALL[:4] + ["validation_scored", "model_trained", "predictions_written"],
    ),
    "one_liners_and_try": (
        ONE_LINERS_AND_TRY,
        "regression",
        [m for m in ALL if m != "features_prepared"],
    ),
    "text_cv": (TEXT_CV, "text", ALL),
    "filled_template": (
        fill_template(default_template("binary", "target", "id", "auc"), "model = SVC(C=1.0)"),
        "binary",
        ALL,
    ),
}


def _write_data(folder, kind: str) -> None:
    rng = np.random.default_rng(1)
    n = 90
    df = pd.DataFrame({"id": np.arange(n), "a": rng.normal(size=n), "b": rng.normal(size=n)})
    df.loc[::9, "b"] = np.nan
    signal = df["a"] + df["b"].fillna(0)
    df["target"] = 3 * signal if kind == "regression" else (signal > 0).astype(int)
    if kind == "text":
        df["text"] = [
            ("great fun" if s > 0 else "dull slow") + f" film {i}" for i, s in enumerate(signal)
        ]
        df = df[["id", "text", "target"]]
    df.iloc[:60].to_csv(folder / "train.csv", index=False)
    df.iloc[60:].drop(columns="target").to_csv(folder / "test.csv", index=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, run_scripts):
    """Every script run twice: as written and instrumented by the rules."""
    root = tmp_path_factory.mktemp("runs")
    folders, results = [], {}
    for name, (code, kind, _) in {**SCRIPTS, "forger": (FORGER, "binary", [])}.items():
        result = instrument(code, NONCE)
        results[name] = result
        for variant, text in (("original", code), ("instrumented", result.code)):
            folder = root / name / variant
            folder.mkdir(parents=True)
            _write_data(folder, kind)
            (folder / "main.py").write_text(text)
            folders.append(folder)
    outputs = run_scripts(folders)
    return {
        name: (
            results[name],
            outputs[root / name / "original"],
            outputs[root / name / "instrumented"],
            root / name,
        )
        for name in results
    }


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_rules_instrument_realistic_scripts(name, runs):
    result, (ok_orig, out_orig), (ok_instr, out_instr), folder = runs[name]
    assert result.method == "rules" and result.rejected_reason is None
    ast.parse(result.code)
    assert only_prints_added(SCRIPTS[name][0], result.code)
    assert ok_orig and ok_instr, out_instr
    report = parse_milestones(out_instr, NONCE)
    assert report.reached == SCRIPTS[name][2]
    assert report.forged == 0
    # nothing but the markers changed: same other output, same submission
    unmarked = "".join(
        line for line in out_instr.splitlines(keepends=True) if "[[PRACTICUM:" not in line
    )
    assert unmarked == out_orig
    assert (folder / "original" / "submission.csv").read_text() == (
        folder / "instrumented" / "submission.csv"
    ).read_text()


def test_validation_value_is_the_scripts_score(runs):
    _, _, (_, out), _ = runs["aide_style"]
    printed = float(re.search(r"Validation accuracy: ([0-9.]+)", out).group(1))
    assert parse_milestones(out, NONCE).validation_score == pytest.approx(printed, abs=1e-4)


def test_forged_markers_printed_by_agent_code_earn_nothing(runs):
    result, _, (ok, out), _ = runs["forger"]
    assert result.method == "none" and result.code == FORGER
    report = parse_milestones(out, NONCE)
    assert ok and report.reached == [] and report.forged == 2


# ------------------------------------------------------------------ rule edge cases

EDGE = '''\
import pandas as pd
class Trainer:
    @staticmethod
    def go(model, X, y):
        if X is None: raise ValueError("no X")
        else: model.fit(X, y)
        return model
def get():
    return pd.read_csv("train.csv")
doc = """model.fit(X, y) inside a string does nothing"""
for i in range(2): model = object(); model.fit = None
while False:
\tclf = RandomForestClassifier()
match doc:
    case "x":
        sub.to_csv("submission.csv")
    case _:
        pass
'''


def test_rules_keep_edge_cases_valid_and_unchanged():
    code = rule_instrument(EDGE, NONCE)
    ast.parse(code)
    assert only_prints_added(EDGE, code)
    lines = code.splitlines()
    # the one-line else body: the marker goes after the whole if statement, in the method
    assert lines[lines.index("        else: model.fit(X, y)") + 1] == "        " + marker_line(
        NONCE, "model_trained"
    )
    # a loaded-and-returned frame: marker just before the return
    assert lines[lines.index('    return pd.read_csv("train.csv")') - 1] == "    " + marker_line(
        NONCE, "data_loaded"
    )
    assert "\t" + marker_line(NONCE, "model_built") in lines  # tab-indented block keeps its tab
    assert "        " + marker_line(NONCE, "predictions_written") in lines  # inside a match case
    assert code.count(marker_line(NONCE, "model_trained")) == 1  # the string literal earned nothing


def test_rules_skip_unknown_code_and_bad_code():
    assert instrument("x = 1\nprint(x)\n", NONCE).method == "none"
    broken = instrument("def f(:\n", NONCE)
    assert broken.method == "none" and broken.code == "def f(:\n"


def test_score_inside_a_string_is_not_printed_as_a_value():
    code = rule_instrument('msg = "acc=" + str(accuracy_score(y, p))\n', NONCE)
    assert "validation_scored" not in code


# ------------------------------------------------------------------ only_prints_added


def test_only_prints_added():
    original = "import os\nmodel = Forest(n=10)\nmodel.fit(X)\n"
    marked = (
        "import os\n" + marker_line(NONCE, "libraries_imported") + "\nmodel = Forest(n=10)\n"
        "model.fit(X)  # comment\n" + marker_line(NONCE, "validation_scored", "model.score_") + "\n"
    )
    assert only_prints_added(original, marked)
    assert not only_prints_added(original, marked.replace("n=10", "n=11"))
    assert not only_prints_added(original, marked + "print('hello')\n")
    assert not only_prints_added(
        original, "import os\nmodel = Forest(n=10)\n"
    )  # a statement removed
    assert not only_prints_added(
        original, marked + "print('[[PRACTICUM:ab:model_trained]]' % model.fit(X))\n"
    )
    assert not only_prints_added(original, "import os\nmodel = Forest(n=10\n")
    forged = original + "print('[[PRACTICUM:0:model_trained]]')\n"
    assert only_prints_added(forged, forged.replace("0:model", "1:model"))


# ------------------------------------------------------------------ LLM instrumenter


class FakeClient:
    """A frozen-model stand-in (a ModelClient): answers `reply(prompt)`, records the calls."""

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def complete(self, messages, params=None):
        self.calls.append((messages, params))
        return Completion(self.reply(messages[-1]["content"]), [], "stop")


def _fake(transform):
    """An LLMInstrumenter whose model reads the script and nonce from the prompt and answers
    via transform(script, nonce)."""

    def reply(prompt: str) -> str:
        nonce = re.search(r"\[\[PRACTICUM:([0-9a-f]+):", prompt).group(1)
        script = prompt.rsplit(f"{FENCE}python\n", 1)[1].rsplit(f"\n{FENCE}", 1)[0] + "\n"
        return transform(script, nonce)

    return LLMInstrumenter(FakeClient(reply))


def _answering(text: str) -> LLMInstrumenter:
    return LLMInstrumenter(FakeClient(lambda prompt: text))


def test_llm_prompt_shows_the_exact_marker_lines():
    prompt = _answering("").prompt(AIDE_STYLE, NONCE)
    for milestone in ALL:
        if milestone != "validation_scored":
            assert marker_line(NONCE, milestone) in prompt
    assert AIDE_STYLE.strip() in prompt


def test_llm_correct_rewrite_is_accepted():
    llm = _fake(lambda s, n: f"Here it is:\n{FENCE}python\n{rule_instrument(s, n)}{FENCE}")
    result = instrument(AIDE_STYLE, NONCE, llm)
    assert result.method == "llm" and result.rejected_reason is None
    assert result.code == rule_instrument(AIDE_STYLE, NONCE)


def test_llm_rewrite_that_changes_a_hyperparameter_falls_back_to_rules():
    def sneaky(script, nonce):
        slower = rule_instrument(script, nonce).replace("n_estimators=30", "n_estimators=300")
        return f"{FENCE}python\n{slower}{FENCE}"

    result = instrument(AIDE_STYLE, NONCE, _fake(sneaky))
    assert result.method == "rules" and "changes more than marker prints" in result.rejected_reason
    assert "n_estimators=30," in result.code


def test_llm_garbage_falls_back_to_rules():
    result = instrument(AIDE_STYLE, NONCE, _answering("Sure! I added the prints."))
    assert result.method == "rules" and result.rejected_reason.startswith("rewrite unusable")


def test_llm_failure_or_wrong_nonce_falls_back_to_rules():
    def down(prompt):
        raise ConnectionError("refused")

    refused = instrument(AIDE_STYLE, NONCE, LLMInstrumenter(FakeClient(down)))
    assert refused.method == "rules" and "ConnectionError" in refused.rejected_reason
    wrong = _fake(lambda s, n: f"{FENCE}python\n{rule_instrument(s, 'ffff')}{FENCE}")
    result = instrument(AIDE_STYLE, NONCE, wrong)
    assert result.method == "rules" and "no marker with this run's nonce" in result.rejected_reason


def test_llm_rewrite_with_a_copied_placeholder_falls_back_to_rules():
    def placeholder(script, nonce):
        score = marker_line(nonce, "validation_scored", "SCORE")
        return f"{FENCE}python\n{script}{score}\n{FENCE}"

    result = instrument(AIDE_STYLE, NONCE, _fake(placeholder))
    assert result.method == "rules" and "['SCORE']" in result.rejected_reason


def test_llm_bug_is_not_swallowed():
    def buggy(prompt):
        raise TypeError("complete() got an unexpected keyword argument")

    with pytest.raises(TypeError):
        instrument(AIDE_STYLE, NONCE, LLMInstrumenter(FakeClient(buggy)))


def test_llm_request_is_greedy_chat_with_a_bounded_reply():
    client = FakeClient(lambda prompt: "no code")
    llm = LLMInstrumenter(client, max_new_tokens=2048)
    instrument(AIDE_STYLE, NONCE, llm)
    ((messages, params),) = client.calls
    assert messages == [
        {"role": "system", "content": LLMInstrumenter.SYSTEM},
        {"role": "user", "content": llm.prompt(AIDE_STYLE, NONCE)},
    ]
    # the rewrite is the script plus seven prints: len/2 + 400 tokens, capped
    assert params.temperature == 0.0
    assert params.max_new_tokens == len(AIDE_STYLE) // 2 + 400 < 2048
    assert llm.budget("x" * 10_000) == 2048


def test_redacted_output_hides_the_nonce(runs):
    _, _, (_, out), _ = runs["aide_style"]
    assert NONCE not in redact_markers(out) and "[milestone: model_trained]" in redact_markers(out)


def _rule_milestones(code: str) -> list[str]:
    instrumented = rule_instrument(code, NONCE)
    return [m for m in ALL if f":{m}]]" in instrumented]


@pytest.mark.parametrize(
    "code, expected",
    [
        ("clf = RandomForestClassifier().fit(X, y)\n", ["model_built", "model_trained"]),
        ("scaler.fit(X)\nle.fit(y)\nvectorizer.fit(texts)\n", []),
        ("scores = cross_val_score(Ridge(), X, y)\n", ["model_built", "validation_scored"]),
        ('df.to_csv("clean.csv")\n', []),
        ('with open("sample_submission.csv") as f:\n    rows = f.read()\n', ["data_loaded"]),
        (
            'with open("out/submission.csv", "w") as f:\n    f.write(text)\n',
            ["predictions_written"],
        ),
        ("model_path = os.path.join(root, 'm.pkl')\n", []),
        ("model = build_model(params)\n", ["model_built"]),
        ("for x in range(3):\n    y = x\n", []),
    ],
)
def test_rule_heuristics(code, expected):
    assert _rule_milestones(code) == expected


def test_llm_cost_is_recorded_and_long_scripts_skip_the_model():
    def reply(prompt):
        nonce = re.search(r"\[\[PRACTICUM:([0-9a-f]+):", prompt).group(1)
        script = prompt.rsplit(f"{FENCE}python\n", 1)[1].rsplit(f"\n{FENCE}", 1)[0] + "\n"
        return f"{FENCE}python\n{rule_instrument(script, nonce)}{FENCE}"

    client = FakeClient(reply)
    client.complete = (
        lambda inner: lambda m, p=None: Completion(inner(m, p).text, [7] * 42, "stop")
    )(client.complete)
    used = instrument(AIDE_STYLE, NONCE, LLMInstrumenter(client))
    assert used.method == "llm" and used.llm_tokens == 42 and used.llm_seconds > 0
    capped = LLMInstrumenter(client, max_script_chars=len(AIDE_STYLE) - 1)
    skipped = instrument(AIDE_STYLE, NONCE, capped)
    assert skipped.method == "rules" and skipped.llm_tokens == 0 and skipped.llm_seconds == 0
    assert skipped.rejected_reason.startswith(f"script longer than {len(AIDE_STYLE) - 1}")
    assert len(client.calls) == 1  # the long script never reached the model
    assert instrument(AIDE_STYLE, NONCE, LLMInstrumenter(client, max_new_tokens=64)).method
    assert client.calls[-1][1].max_new_tokens == 64


def test_a_score_printed_directly_is_marked_without_a_value():
    code = (
        "from sklearn.metrics import accuracy_score\n"
        "print('validation accuracy', accuracy_score(y_val, model.predict(X_val)))\n"
        "print('done')\n"
    )
    marked = rule_instrument(code, NONCE)
    assert marked.splitlines()[3] == marker_line(NONCE, "validation_scored")  # after the print
    assert marked.count("validation_scored") == 1  # print('done') scores nothing
