"""The "lines" protocol of the LLM instrumenter: the model answers `milestone: N`, code inserts
the marker prints after the statement ending on line N; bad answers fall back to the rules."""

import re

from practicum.engine.service import Completion
from practicum.envs.mle.credit import line_markers
from practicum.envs.mle.credit.instrument import LLMInstrumenter, instrument
from practicum.envs.mle.credit.marker_checks import only_prints_added
from practicum.envs.mle.credit.milestones import marker_line

NONCE = "5eed0123abcd4567"
SCRIPT = """\
import pandas as pd
from sklearn.linear_model import LogisticRegression

def main():
    train = pd.read_csv("train.csv")
    X = train.drop(columns=["y"])
    model = LogisticRegression(
        max_iter=100)
    model.fit(X, train["y"])
    return model

main(); print("done")
"""


def test_the_prompt_numbers_every_line_and_names_every_milestone():
    text = line_markers.prompt(SCRIPT)
    assert ' 5|     train = pd.read_csv("train.csv")' in text
    assert '12| main(); print("done")' in text
    assert "- model_trained: after the model is fitted" in text


def test_answers_are_parsed_leniently_first_mention_wins():
    answer = (
        "libraries_imported: 2\n- data_loaded: line 5\n`features_prepared`: 6\n"
        "model_built = 8\nmodel_trained: 9\ndata_loaded: 1\nsomething_else: 3\nnonsense"
    )
    assert line_markers.parse_answer(answer) == {
        "libraries_imported": 2,
        "data_loaded": 5,
        "features_prepared": 6,
        "model_built": 8,
        "model_trained": 9,
    }


def test_markers_go_after_the_statement_ending_on_the_line_with_its_indent():
    answer = {"libraries_imported": 2, "data_loaded": 5, "model_built": 8, "model_trained": 9}
    marked = line_markers.insert_markers(SCRIPT, NONCE, answer)
    lines = marked.splitlines()
    assert lines[2] == marker_line(NONCE, "libraries_imported")
    assert lines[6] == "    " + marker_line(NONCE, "data_loaded")
    assert lines[10] == "    " + marker_line(NONCE, "model_built")  # after the 2-line call
    assert lines[12] == "    " + marker_line(NONCE, "model_trained")
    assert only_prints_added(SCRIPT, marked)


def test_lines_without_a_safe_place_get_no_marker():
    # 4: a def header; 7: inside a call; 10: a return; 12: two statements; 3: blank; 99: none
    answer = {
        "data_loaded": 4,
        "features_prepared": 7,
        "model_built": 10,
        "model_trained": 12,
        "validation_scored": 3,
        "predictions_written": 99,
    }
    assert line_markers.insert_markers(SCRIPT, NONCE, answer) == SCRIPT


class Answering:
    def __init__(self, text):
        self.text, self.calls = text, []

    def complete(self, messages, params=None):
        self.calls.append((messages, params))
        return Completion(self.text, [1] * 11, "stop")


def test_the_instrumenter_uses_the_answer_and_falls_back_on_none():
    client = Answering("data_loaded: 5\nmodel_trained: 9")
    result = instrument(SCRIPT, NONCE, LLMInstrumenter(client, protocol="lines"))
    assert result.method == "llm" and result.llm_tokens == 11
    assert re.findall(r":(\w+)\]\]", result.code) == ["data_loaded", "model_trained"]
    ((messages, params),) = client.calls
    assert params.max_new_tokens == LLMInstrumenter.LINES_BUDGET
    assert messages[-1]["content"] == line_markers.prompt(SCRIPT)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    example_script = line_markers._EXAMPLE_SCRIPT  # the worked example's answer is right
    answer = line_markers.parse_answer(line_markers.EXAMPLE[1])
    marked = line_markers.insert_markers(example_script, NONCE, answer)
    assert re.findall(r":(\w+)\]\]", marked) == list(answer)
    assert [
        line for line in marked.splitlines() if "PRACTICUM" not in line
    ] == example_script.splitlines()
    garbage = instrument(SCRIPT, NONCE, LLMInstrumenter(Answering("I can't"), protocol="lines"))
    assert garbage.method == "rules" and "no `milestone: line` pair" in garbage.rejected_reason
    nowhere = instrument(
        SCRIPT, NONCE, LLMInstrumenter(Answering("data_loaded: 4"), protocol="lines")
    )
    assert nowhere.method == "rules" and "adds no marker" in nowhere.rejected_reason
