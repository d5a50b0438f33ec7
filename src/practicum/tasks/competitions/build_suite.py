"""Maintainers' script: regenerate the bundled suite's generated files.

    python -m practicum.tasks.competitions.build_suite snapshot      # python-docs-chapters text
    python -m practicum.tasks.competitions.build_suite checksums     # every checksums.yaml
    python -m practicum.tasks.competitions.build_suite leaderboards  # every leaderboard.csv
    python -m practicum.tasks.competitions.build_suite all [--only ID ...]

Leaderboards: each competition's "teams" are a fixed zoo of scikit-learn baselines (constant
guesses, linear models at three regularisation strengths, k-nearest neighbours, decision
trees of three depths, random forest, extra trees, gradient boosting, naive Bayes; TF-IDF
pipelines for text), fit on public/train.csv with random_state=0, scored on the private
answers by the competition's own grade.py and written best first. With ~14 teams MLE-bench's
rule puts gold at the best baseline, silver at the 2nd, bronze at the 5th.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import Lasso, LogisticRegression, Ridge, RidgeClassifier
from sklearn.naive_bayes import GaussianNB, MultinomialNB
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from practicum.envs.mle.competitions import mlebench_compat
from practicum.envs.mle.competitions.competition import Competition
from practicum.envs.mle.competitions.loading import list_competitions
from practicum.envs.mle.competitions.prepared_data import tree_checksums
from practicum.envs.mle.competitions.submission_checks import InvalidSubmissionError

HERE = Path(__file__).parent

# ---------------------------------------------------------------------------------------------
# The text snapshot: pydoc_data.topics paragraphs -> reference chapter.

CHAPTERS = {
    "lexical-analysis": "identifiers id-classes integers floating imaginary numbers strings",
    "data-model": "objects types specialnames customization attribute-access callable-types "
    "numeric-types sequence-types context-managers async",
    "expressions": "atom-identifiers atom-literals attribute-references await binary bitwise "
    "booleans calls comparisons conversions dict exprlists in lambda lists "
    "operator-summary power shifting slicings subscriptions unary",
    "simple-statements": "assert assignment augassign break continue del global import "
    "nonlocal pass raise return yield",
    "compound-statements": "compound if else while for try with function class",
    "builtin-types": "bltin-code-objects bltin-ellipsis-object bltin-null-object "
    "bltin-type-objects string-methods truth typesfunctions typesmapping "
    "typesmethods typesmodules typesseq typesseq-mutable specialattrs "
    "formatstrings",
}
"""pydoc topic -> chapter of the Language Reference (builtin-types: the Library's stdtypes).
The small "execution model" chapter and the pdb topic are left out."""


def build_snapshot(path: Path = HERE / "python-docs-chapters" / "source" / "paragraphs.csv") -> int:
    """Paragraphs of >= 12 words, whitespace collapsed, deduplicated; a paragraph found under
    two chapters is dropped. Returns the row count."""
    import pydoc_data.topics

    chapter_of = {topic: ch for ch, topics in CHAPTERS.items() for topic in topics.split()}
    seen: dict[str, set[str]] = {}
    for topic in sorted(pydoc_data.topics.topics):
        if topic not in chapter_of:
            continue
        for paragraph in pydoc_data.topics.topics[topic].split("\n\n"):
            text = " ".join(paragraph.split())
            if len(text.split()) >= 12:
                seen.setdefault(text, set()).add(chapter_of[topic])
    rows = [(next(iter(ch)), text) for text, ch in seen.items() if len(ch) == 1]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=["chapter", "text"]).to_csv(path, index=False)
    return len(rows)


# ---------------------------------------------------------------------------------------------
# Checksums.


def record_checksums(comp: Competition) -> dict:
    """Run prepare.py into a scratch folder and write checksums.yaml from its output."""
    with tempfile.TemporaryDirectory() as scratch:
        public, private = Path(scratch) / "public", Path(scratch) / "private"
        public.mkdir()
        private.mkdir()
        preparer = mlebench_compat.load_callable(comp.root, comp.config["preparer"])
        preparer(Path(scratch) / "raw", public, private)
        digests = tree_checksums(public, private)
    (comp.root / "checksums.yaml").write_text(yaml.safe_dump(digests, sort_keys=True))
    return digests


# ---------------------------------------------------------------------------------------------
# Leaderboards.


def _scaled(model) -> Pipeline:
    return make_pipeline(StandardScaler(), model)


def classifier_zoo() -> dict[str, Callable[[], object]]:
    return {
        "constant-prior": lambda: DummyClassifier(strategy="prior"),
        "stratified-guess": lambda: DummyClassifier(strategy="stratified", random_state=0),
        "logistic-c0.01": lambda: _scaled(LogisticRegression(C=0.01, max_iter=5000)),
        "logistic-c1": lambda: _scaled(LogisticRegression(C=1.0, max_iter=5000)),
        "logistic-c100": lambda: _scaled(LogisticRegression(C=100.0, max_iter=5000)),
        "knn-1": lambda: _scaled(KNeighborsClassifier(1)),
        "knn-5": lambda: _scaled(KNeighborsClassifier(5)),
        "knn-25": lambda: _scaled(KNeighborsClassifier(25)),
        "tree-depth2": lambda: DecisionTreeClassifier(max_depth=2, random_state=0),
        "tree-depth5": lambda: DecisionTreeClassifier(max_depth=5, random_state=0),
        "tree-full": lambda: DecisionTreeClassifier(random_state=0),
        "random-forest": lambda: RandomForestClassifier(200, random_state=0),
        "extra-trees": lambda: ExtraTreesClassifier(200, random_state=0),
        "gradient-boosting": lambda: HistGradientBoostingClassifier(random_state=0),
        "naive-bayes": lambda: GaussianNB(),
    }


def regressor_zoo() -> dict[str, Callable[[], object]]:
    return {
        "constant-mean": lambda: DummyRegressor(strategy="mean"),
        "constant-median": lambda: DummyRegressor(strategy="median"),
        "ridge-a0.1": lambda: _scaled(Ridge(alpha=0.1)),
        "ridge-a10": lambda: _scaled(Ridge(alpha=10.0)),
        "ridge-a1000": lambda: _scaled(Ridge(alpha=1000.0)),
        "lasso-a1": lambda: _scaled(Lasso(alpha=1.0)),
        "knn-5": lambda: _scaled(KNeighborsRegressor(5)),
        "knn-25": lambda: _scaled(KNeighborsRegressor(25)),
        "tree-depth3": lambda: DecisionTreeRegressor(max_depth=3, random_state=0),
        "tree-full": lambda: DecisionTreeRegressor(random_state=0),
        "random-forest": lambda: RandomForestRegressor(200, random_state=0),
        "extra-trees": lambda: ExtraTreesRegressor(200, random_state=0),
        "gradient-boosting": lambda: HistGradientBoostingRegressor(random_state=0),
    }


def text_zoo() -> dict[str, Callable[[], object]]:
    return {
        "constant-prior": lambda: DummyClassifier(strategy="prior"),
        "stratified-guess": lambda: DummyClassifier(strategy="stratified", random_state=0),
        "tfidf-logistic-c1": lambda: make_pipeline(
            TfidfVectorizer(), LogisticRegression(max_iter=5000)
        ),
        "tfidf-logistic-c10": lambda: make_pipeline(
            TfidfVectorizer(), LogisticRegression(C=10, max_iter=5000)
        ),
        "tfidf-bigram-svm": lambda: make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), LinearSVC()),
        "tfidf-svm": lambda: make_pipeline(TfidfVectorizer(), LinearSVC()),
        "tfidf-ridge": lambda: make_pipeline(TfidfVectorizer(), RidgeClassifier()),
        "tfidf-knn-5": lambda: make_pipeline(TfidfVectorizer(), KNeighborsClassifier(5)),
        "counts-naive-bayes": lambda: make_pipeline(CountVectorizer(), MultinomialNB()),
        "tfidf-naive-bayes": lambda: make_pipeline(TfidfVectorizer(), MultinomialNB()),
        "char-tfidf-logistic": lambda: make_pipeline(
            TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), max_features=20000),
            LogisticRegression(C=10, max_iter=5000),
        ),
        "counts-tree-depth5": lambda: make_pipeline(
            CountVectorizer(), DecisionTreeClassifier(max_depth=5, random_state=0)
        ),
    }


def baseline_submission(
    comp: Competition, model, train: pd.DataFrame, test: pd.DataFrame
) -> pd.DataFrame:
    """Fit `model` on train and write a submission in the competition's format."""
    section = comp.practicum
    target = section.target_columns[0]
    id_column = section.id_column
    features = [c for c in test.columns if c != id_column]
    if section.task == "text-classification":
        x_train, x_test = train["text"], test["text"]
    else:
        x_train, x_test = train[features].to_numpy(float), test[features].to_numpy(float)
    model.fit(x_train, train[target])
    out = pd.DataFrame({id_column: test[id_column]})
    columns = section.submission_columns[1:]
    if comp.metric in ("log-loss", "auc-roc"):
        proba = model.predict_proba(x_test)
        classes = [str(c) for c in model.classes_]
        if len(columns) > 1:  # one probability column per class
            for column in columns:
                out[column] = proba[:, classes.index(column)]
        else:  # the probability of the positive class "1"
            out[target] = proba[:, classes.index("1")]
    else:
        predicted = model.predict(x_test)
        if comp.metric == "rmsle":
            predicted = np.clip(predicted, 0, None)
        out[target] = predicted
    return out


def build_leaderboard(comp: Competition) -> pd.DataFrame:
    """Score every baseline of the matching zoo; return the table best first."""
    with tempfile.TemporaryDirectory() as scratch:
        paths = comp.prepare(Path(scratch))
        train, test = (
            pd.read_csv(paths.public / "train.csv"),
            pd.read_csv(paths.public / "test.csv"),
        )
        answers = pd.read_csv(paths.answers)
        if comp.practicum.task == "text-classification":
            zoo = text_zoo()
        elif comp.practicum.task == "regression":
            zoo = regressor_zoo()
        else:
            zoo = classifier_zoo()
        rows = []
        for team, make in zoo.items():
            try:
                submission = baseline_submission(comp, make(), train, test)
                rows.append((team, comp.grade(submission, answers)))
            except (InvalidSubmissionError, AttributeError) as err:  # e.g. no predict_proba
                print(f"  {comp.id}: {team} skipped ({err})")
    table = pd.DataFrame(rows, columns=["team", "score"])
    table = table.sort_values("score", ascending=comp.lower_is_better, kind="stable")
    table["score"] = table["score"].round(6)
    return table.reset_index(drop=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["snapshot", "checksums", "leaderboards", "all"])
    parser.add_argument("--only", nargs="*", default=None, help="competition ids")
    args = parser.parse_args(argv)
    if args.what in ("snapshot", "all"):
        print(f"python-docs-chapters: {build_snapshot()} paragraphs")
    comps = [c for c in list_competitions() if c.root.parent == HERE]
    if args.only:
        comps = [c for c in comps if c.id in args.only]
    for comp in comps:
        if args.what in ("checksums", "all"):
            record_checksums(comp)
            print(f"{comp.id}: checksums.yaml written")
        if args.what in ("leaderboards", "all"):
            table = build_leaderboard(comp)
            table.to_csv(comp.root / "leaderboard.csv", index=False)
            print(
                f"{comp.id}: {len(table)} teams, best {table['score'].iloc[0]:g} "
                f"({table['team'].iloc[0]}), worst {table['score'].iloc[-1]:g}"
            )


if __name__ == "__main__":
    main()
