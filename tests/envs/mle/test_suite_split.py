"""mle_suite: the train/held-out split, option parsing and the env factory."""

from __future__ import annotations

import pytest

from practicum.config import load_config
from practicum.envs.mle.env import MleEnv
from practicum.envs.mle.suite import DEFAULT_HELD_OUT, MleOptions, parse_options, \
    split_competitions
from practicum.suites import load_suite

KNOWN = sorted(["breast-cancer-diagnosis", "diabetes-progression", "digits-recognition",
                "election-vote-1996", "health-insurance-visits", "iris-species",
                "marital-affairs", "python-docs-chapters", "school-math-pass-rate",
                "travel-mode-choice", "wine-cultivar"])


def test_default_split_holds_out_three_of_the_eleven():
    train, held = split_competitions(KNOWN, MleOptions())
    assert held == list(DEFAULT_HELD_OUT) and len(held) == 3
    assert len(train) == 8 and not set(train) & set(held) and set(train) | set(held) == set(KNOWN)


def test_exclude_and_explicit_train_lists():
    opts = parse_options({"exclude": ["health-insurance-visits"], "held_out": ["iris-species"]})
    train, held = split_competitions(KNOWN, opts)
    assert held == ["iris-species"] and "health-insurance-visits" not in train
    assert len(train) == 9
    opts = parse_options({"train": ["wine-cultivar", "wine-cultivar"], "held_out": ["iris-species"]})
    assert split_competitions(KNOWN, opts) == (["wine-cultivar"], ["iris-species"])


@pytest.mark.parametrize("options, message", [
    ({"held_out": ["no-such-competition"]}, "task.options.held_out: unknown competition"),
    ({"train": ["iris-species"], "held_out": ["iris-species"]}, "also held out"),
    ({"exclude": KNOWN, "held_out": ["iris-species"]}, "no training competitions"),
    ({"held_out": []}, "name at least one"),
])
def test_bad_splits_name_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        split_competitions(KNOWN, parse_options(options))


@pytest.mark.parametrize("options, where", [
    ({"wall_secs": 3}, "task.options.wall_secs: unknown mle option"),
    ({"mode": "notebook"}, "task.options.mode"),
    ({"improve_prob": 2}, "task.options.improve_prob"),
])
def test_bad_options_name_the_key(options, where):
    with pytest.raises(ValueError, match=where):
        parse_options(options)


def test_suite_tasks_and_factory(tmp_path):
    opts = {"instrumenter": "rules", "held_out": ["iris-species", "wine-cultivar"],
            "train": ["travel-mode-choice"], "train_repeats": 2, "eval_repeats": 3,
            "data_root": str(tmp_path)}
    cfg = load_config(None, ["task.name=mle", f"task.options={opts!r}"])
    suite = load_suite(cfg)  # dispatches task.name == "mle" to mle_suite
    assert [t.task_id for t in suite.train_tasks] == ["travel-mode-choice"] * 2
    assert all(t.data == {"competition": "travel-mode-choice", "split": "train"}
               for t in suite.train_tasks)
    assert [t.task_id for t in suite.eval_tasks] == [
        "iris-species#0", "iris-species#1", "iris-species#2",
        "wine-cultivar#0", "wine-cultivar#1", "wine-cultivar#2"]
    assert {t.data["split"] for t in suite.eval_tasks} == {"eval"}
    first, second = suite.make_env(), suite.make_env()
    assert isinstance(first, MleEnv) and first is not second
    assert first.buffer is second.buffer  # one solution buffer per suite
    assert first.rng.random() != second.rng.random()  # each episode its own random stream
    assert (tmp_path / "iris-species" / "prepared" / "public" / "train.csv").is_file()
    prompt = first.reset(suite.eval_tasks[0])
    assert "Iris" in prompt and "model = " in prompt


def test_unknown_instrumenter_fails_at_suite_build(tmp_path):
    opts = {"instrumenter": "gpt", "held_out": ["iris-species"], "train": ["wine-cultivar"],
            "data_root": str(tmp_path)}
    with pytest.raises(ValueError, match="task.options.instrumenter"):
        load_suite(load_config(None, ["task.name=mle", f"task.options={opts!r}"]))
