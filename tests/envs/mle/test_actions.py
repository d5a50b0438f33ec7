import textwrap

import numpy as np
import pandas as pd
import pytest

from practicum.envs.mle.actions import ActionParseError, code_blocks, parse_script_action
from practicum.envs.mle.prompts import SYSTEM_PROMPT, scratch_prompt
from practicum.envs.mle.sklearn_template import default_template
from practicum.envs.mle.template import END_MARKER, START_MARKER, Template, fill_template

FENCE = "```"


# ------------------------------------------------------------------ script mode


def test_plan_then_one_python_block():
    reply = f"I fit a forest.\n{FENCE}python\nimport pandas as pd\nprint(1)\n{FENCE}\nDone."
    action = parse_script_action(reply)
    assert action.plan == "I fit a forest."
    assert action.code == "import pandas as pd\nprint(1)\n"


def test_untagged_block_accepted_when_it_parses():
    action = parse_script_action(f"plan\n{FENCE}\nx = 1\n{FENCE}")
    assert action.code == "x = 1\n" and action.plan == "plan"


def test_other_languages_are_ignored():
    reply = f"Install:\n{FENCE}bash\npip install x\n{FENCE}\nThen:\n{FENCE}python\nx = 2\n{FENCE}"
    assert parse_script_action(reply).code == "x = 2\n"


def test_untagged_output_example_next_to_python_block_is_ignored():
    reply = f"{FENCE}python\nprint(3)\n{FENCE}\nIt prints:\n{FENCE}\n3\n{FENCE}"
    assert parse_script_action(reply).code == "print(3)\n"


def test_no_block():
    with pytest.raises(ActionParseError, match="^no ```python code block found$"):
        parse_script_action("I would train a random forest.")


def test_two_blocks():
    reply = f"{FENCE}python\na = 1\n{FENCE}\nand\n{FENCE}python\nb = 2\n{FENCE}"
    with pytest.raises(ActionParseError, match="^2 code blocks found; send exactly one$"):
        parse_script_action(reply)


def test_syntax_error_names_the_line():
    reply = f"{FENCE}python\nimport os\nx = 1\ny = (\n{FENCE}"
    with pytest.raises(ActionParseError, match=r"^code does not parse: SyntaxError line 3: "):
        parse_script_action(reply)


def test_cut_off_block():
    with pytest.raises(ActionParseError, match="not closed"):
        parse_script_action(f"plan\n{FENCE}python\nimport pandas as pd\nx = 1\n")


def test_empty_block():
    with pytest.raises(ActionParseError, match="empty"):
        parse_script_action(f"plan\n{FENCE}python\n\n{FENCE}")


def test_crlf_indented_and_glued_fences():
    reply = f"plan\r\n  {FENCE}python\r\n  x = 1\r\n  print(x){FENCE}\r\n"
    assert parse_script_action(reply).code == "x = 1\nprint(x)\n"


def test_four_backtick_fence_may_contain_three():
    blocks = code_blocks(f"````python\ns = '''\n{FENCE}\n'''\n````")
    assert len(blocks) == 1 and blocks[0].closed and FENCE in blocks[0].code


# ------------------------------------------------------------------ template mode

NESTED = Template(
    script=textwrap.dedent(f"""\
        def make():
            {START_MARKER}
            model = None
            {END_MARKER}
            return model
        """),
    instruction="assign `model`",
    max_lines=3,
)


def test_fill_template_reindents_a_fenced_reply():
    reply = f"Use a list.\n{FENCE}python\n        model = [1,\n           2]\n{FENCE}"
    script = fill_template(NESTED, reply)
    namespace: dict = {}
    exec(script, namespace)
    assert namespace["make"]() == [1, 2]
    assert "\n    model = [1,\n       2]\n" in script


def test_fill_template_accepts_a_bare_reply():
    script = fill_template(NESTED, "model = 7\n")
    namespace: dict = {}
    exec(script, namespace)
    assert namespace["make"]() == 7


def test_fill_template_rejects_markers():
    reply = f"{FENCE}python\n{START_MARKER}\nmodel = 1\n{END_MARKER}\n{FENCE}"
    with pytest.raises(ActionParseError, match="marker"):
        fill_template(NESTED, reply)


def test_fill_template_rejects_long_code():
    with pytest.raises(ActionParseError, match="4 lines; at most 3"):
        fill_template(NESTED, "a = 1\nb = 2\nc = 3\nmodel = a\n")


def test_fill_template_requires_model():
    with pytest.raises(ActionParseError, match="must assign `model`"):
        fill_template(NESTED, "clf = 1")


def test_fill_template_bare_prose_is_rejected():
    with pytest.raises(ActionParseError, match="does not parse"):
        fill_template(NESTED, "I think a random forest is best")


def test_template_checks_its_markers():
    with pytest.raises(ValueError, match="exactly once"):
        Template(script="x = 1\n", instruction="")


def test_default_template_rejects_unknown_task_type():
    with pytest.raises(ValueError, match="unknown task_type 'clustering'"):
        default_template("clustering", "y", "id", "accuracy")


def _write_data(folder, kind: str) -> None:
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame(
        {
            "id": np.arange(n),
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "color": rng.choice(["red", "blue", None], size=n),
        }
    )
    df.loc[::7, "b"] = np.nan
    signal = df["a"] + df["b"].fillna(0)
    if kind == "binary":
        df["target"] = (signal > 0).astype(int)
    elif kind == "multiclass":
        df["target"] = np.select([signal < -0.5, signal < 0.5], ["low", "mid"], "high")
    elif kind == "regression":
        df["target"] = 2 * signal + rng.normal(scale=0.1, size=n)
    else:  # text
        words = {0: "dull boring slow", 1: "great fun lovely"}
        df["text"] = [f"{words[int(s > 0)]} movie number {i}" for i, s in enumerate(signal)]
        df["target"] = (signal > 0).astype(int)
        df = df[["id", "text", "target"]]
    df.iloc[:90].to_csv(folder / "train.csv", index=False)
    df.iloc[90:].drop(columns="target").to_csv(folder / "test.csv", index=False)


CASES = {  # kind -> (task_type, metric, region reply, expected submission columns)
    "binary": (
        "binary",
        "auc-roc",
        "model = RandomForestClassifier(n_estimators=20, random_state=0)",
        ["id", "target"],
    ),
    "multiclass": (
        "multiclass",
        "multi-class-log-loss",
        "model = LogisticRegression(max_iter=500)",
        ["id", "high", "low", "mid"],
    ),
    "regression": ("regression", "rmse", "model = Ridge(alpha=1.0)", ["id", "target"]),
    "text": (
        "text-classification",
        "accuracy",
        f"{FENCE}python\nmodel = LinearSVC()\n{FENCE}",
        ["id", "target"],
    ),
}


def test_default_templates_run_end_to_end(tmp_path, run_scripts):
    folders = []
    for kind, (task_type, metric, reply, _) in CASES.items():
        folder = tmp_path / kind
        folder.mkdir()
        _write_data(folder, kind)
        script = fill_template(default_template(task_type, "target", "id", metric), reply)
        (folder / "main.py").write_text(script)
        folders.append(folder)
    results = run_scripts(folders)
    for kind, folder in zip(CASES, folders):
        ok, out = results[folder]
        assert ok, out
        submission = pd.read_csv(folder / "submission.csv")
        assert list(submission.columns) == CASES[kind][3]
        assert submission["id"].tolist() == list(range(90, 120))
        assert "validation" in out
        if kind == "binary":
            assert submission["target"].between(0, 1).all() and submission["target"].nunique() > 2
        if kind == "multiclass":
            assert np.allclose(submission[["high", "low", "mid"]].sum(axis=1), 1.0)
        if kind == "text":
            assert set(submission["target"]) <= {0, 1}


def test_probability_metric_wraps_models_without_predict_proba():
    script = fill_template(default_template("binary", "y", "id", "auc"), "model = LinearSVC()")
    assert "CalibratedClassifierCV(model" in script
    assert (
        "CalibratedClassifierCV(model"
        not in default_template("binary", "y", "id", "accuracy").script
    )


def test_text_template_offers_only_sparse_friendly_estimators():
    text = default_template("text_classification", "y", "id", "accuracy")
    assert (
        "MultinomialNB" in text.available and "HistGradientBoostingClassifier" not in text.available
    )
    assert "TfidfVectorizer(" in text.script


# ------------------------------------------------------------------ prompts


def test_template_prompt_is_short_and_shows_the_format():
    template = default_template("binary", "target", "id", "auc")
    description = "Predict whether a passenger survived. " * 100
    prompt = scratch_prompt(
        description,
        {"train.csv": "labelled rows", "test.csv": "rows to predict"},
        mode="template",
        template=template,
    )
    assert len(prompt) + len(SYSTEM_PROMPT) < 2400  # ~4 characters per token: < 600 tokens
    assert template.example in prompt and "RandomForestClassifier" in prompt and "[...]" in prompt


def test_script_prompt_has_an_example_reply_that_parses():
    prompt = scratch_prompt("Predict y.", ["train.csv", "test.csv"], mode="script")
    example = prompt[prompt.index("Example reply:") + len("Example reply:") :]
    action = parse_script_action(example)
    assert "submission.csv" in action.code and action.plan
    assert "- train.csv" in prompt


def test_template_prompt_needs_a_template():
    with pytest.raises(ValueError, match="needs a template"):
        scratch_prompt("x", [], mode="template")
