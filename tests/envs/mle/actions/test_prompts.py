"""The from-scratch prompts: short, with a reply format the parsers accept."""

import pytest

from practicum.envs.mle.actions.parsing import parse_script_action
from practicum.envs.mle.actions.prompts import SYSTEM_PROMPT, scratch_prompt
from practicum.envs.mle.actions.sklearn_template import default_template


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
