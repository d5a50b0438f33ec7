"""Red team, through MleEnv and the real sandbox: milestones need evidence, markers cannot be
forged by reading the instrumented file, and honest code using __file__ / sys.argv keeps its
credit (iris, script mode, rule instrumenter, raw scores)."""

import pytest

from practicum.engine.service import ModelService
from practicum.envs.base import Task
from practicum.envs.mle.credit.milestones import MILESTONES
from practicum.envs.mle.suite import MleOptions, mle_suite
from practicum.envs.registry import SuiteContext

IRIS = Task("iris-species", {"competition": "iris-species", "split": "eval"})

NAMES_ONLY = """\
import pandas as pd
from sklearn.metrics import accuracy_score
train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
X = [0]
class Model:
    def fit(self, X, y):
        pass
model = Model()
model.fit([0], [0])
acc = accuracy_score([0], [0])
sub = pd.DataFrame({"id": test["id"], "species": "setosa"})
sub.to_csv("submission.csv", index=False)
"""

READ_OWN_FILE = """\
import os
prefix = "[[" + "PRACT" + "ICUM:"
found = ""
for name in os.listdir("."):
    if name.endswith(".py"):
        text = open(name).read()
        at = text.find(prefix)
        while at >= 0:
            found += text[at:text.find("]]", at) + 2] + "\\n"
            at = text.find(prefix, at + 1)
for m in %r:
    print(prefix + (found.split(":")[1] if found else "0") + ":" + m + "]]")
""" % (list(MILESTONES),)

HONEST_WITH_FILE_AND_ARGV = """\
import os, sys
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
here = os.path.dirname(os.path.abspath(__file__))
print("running", sys.argv[0], "from", here, "lines:", len(open(__file__).read().splitlines()))
train = pd.read_csv(os.path.join(here, "train.csv"))
test = pd.read_csv(os.path.join(here, "test.csv"))
features = [c for c in test.columns if c != "id"]
X = train[features]
X_train, X_val, y_train, y_val = train_test_split(X, train["species"], random_state=0)
model = LogisticRegression(max_iter=1000)
model.fit(X_train, y_train)
score = accuracy_score(y_val, model.predict(X_val))
model.fit(X, train["species"])
sub = pd.DataFrame({"id": test["id"], "species": model.predict(test[features])})
sub.to_csv("submission.csv", index=False)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    options = MleOptions(
        mode="script",
        instrumenter="rules",
        held_out=["iris-species"],
        train=["wine-cultivar"],
        wall_seconds=30,
        score_scale="raw",
        data_root=str(tmp_path_factory.mktemp("mle-markers")),
    )
    suite = mle_suite(options, SuiteContext())
    env = suite.make_env(ModelService())
    yield env
    env.close()


def run(env, code: str):
    env.reset(IRIS, seed=0)
    result = env.step(f"Plan.\n```python\n{code}```")
    return result, env.last_outcome


def test_names_without_the_work_earn_only_what_they_prove(env):
    result, outcome = run(env, NAMES_ONLY)
    assert outcome.valid  # a constant, but of the right shape
    assert outcome.milestones == ["libraries_imported", "data_loaded", "predictions_written"]
    assert set(outcome.unproven) == {
        "features_prepared",
        "model_built",
        "model_trained",
        "validation_scored",
    }
    assert result.reward == pytest.approx(outcome.score + 0.3)


def test_reading_the_instrumented_file_finds_no_nonce(env):
    result, outcome = run(env, READ_OWN_FILE)
    assert outcome.milestones == [] and outcome.forged_markers == len(MILESTONES)
    assert result.reward == -10.0


def test_honest_code_using_file_and_argv_keeps_every_milestone(env):
    result, outcome = run(env, HONEST_WITH_FILE_AND_ARGV)
    assert outcome.self_inspection is None and outcome.valid, outcome.stderr
    assert outcome.milestones == list(MILESTONES), outcome.unproven
    assert "running main.py from" in outcome.stdout
    lines = len(HONEST_WITH_FILE_AND_ARGV.splitlines())
    assert f"lines: {lines}" in outcome.stdout  # it reads its own code, not the instrumented
    assert result.reward == pytest.approx(outcome.score + 0.7)


def test_tracebacks_quote_the_policys_own_line_numbers(env):
    result, outcome = run(env, "import pandas as pd\ntrain = pd.read_csv('train.csv')\n\n1 / 0\n")
    assert 'main.py", line 4' in outcome.stderr and "1 / 0" in outcome.stderr
    assert "ZeroDivisionError" in outcome.stderr


def test_a_run_killed_at_the_time_limit_is_a_failure_whatever_it_wrote(tmp_path):
    options = MleOptions(
        mode="script",
        instrumenter="rules",
        held_out=["iris-species"],
        train=["wine-cultivar"],
        wall_seconds=3,
        data_root=str(tmp_path),
    )
    env = mle_suite(options, SuiteContext()).make_env(ModelService())
    try:
        result, outcome = run(
            env,
            "import shutil, time\n"
            "shutil.copy('sample_submission.csv', 'submission.csv')\n"
            "time.sleep(60)\n",
        )
    finally:
        env.close()
    assert outcome.timed_out and not outcome.valid and outcome.score is None
    assert "time limit" in outcome.failure_reason
    assert result.reward == -10.0  # the failure reward (shutil, time: no data library)
    assert result.duration == 0.0  # no largest duration weight for a timeout
