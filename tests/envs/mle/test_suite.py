"""mle_suite: registration, the train/held-out split, option errors and the env factory."""

from __future__ import annotations

from pathlib import Path

import pytest

from practicum.engine.service import ModelService
from practicum.envs.mle.competitions.loading import bundled_dir
from practicum.envs.mle.env import MleEnv
from practicum.envs.mle.suite import DEFAULT_HELD_OUT, MleOptions, mle_suite, split_competitions
from practicum.envs.registry import SuiteContext, build_suite, env_entry, parse_options
from practicum.errors import ConfigError

KNOWN = sorted(
    [
        "breast-cancer-diagnosis",
        "diabetes-progression",
        "digits-recognition",
        "election-vote-1996",
        "health-insurance-visits",
        "iris-species",
        "marital-affairs",
        "python-docs-chapters",
        "school-math-pass-rate",
        "travel-mode-choice",
        "wine-cultivar",
    ]
)


def options(**values) -> MleOptions:
    return parse_options("mle", values)


def test_the_package_registers_mle():
    entry = env_entry("mle")
    assert entry.options is MleOptions and entry.build is mle_suite


def test_default_split_holds_out_three_of_the_eleven():
    train, held = split_competitions(KNOWN, MleOptions())
    assert held == list(DEFAULT_HELD_OUT) and len(held) == 3
    assert len(train) == 8 and not set(train) & set(held) and set(train) | set(held) == set(KNOWN)


def test_exclude_and_explicit_train_lists():
    opts = options(exclude=["health-insurance-visits"], held_out=["iris-species"])
    train, held = split_competitions(KNOWN, opts)
    assert held == ["iris-species"] and "health-insurance-visits" not in train
    assert len(train) == 9
    opts = options(train=["wine-cultivar", "wine-cultivar"], held_out=["iris-species"])
    assert split_competitions(KNOWN, opts) == (["wine-cultivar"], ["iris-species"])


@pytest.mark.parametrize(
    "values, message",
    [
        ({"held_out": ["no-such-competition"]}, "task.options.held_out: unknown competition"),
        ({"train": ["iris-species"], "held_out": ["iris-species"]}, "also held out"),
        ({"exclude": KNOWN, "held_out": ["iris-species"]}, "no training competitions"),
        ({"held_out": []}, "name at least one"),
    ],
)
def test_bad_splits_name_the_option(values, message):
    with pytest.raises(ConfigError, match=message):
        split_competitions(KNOWN, options(**values))


@pytest.mark.parametrize(
    "values, where",
    [
        ({"wall_secs": 3}, "task.options.wall_secs: unknown mle option"),
        ({"mode": "notebook"}, "task.options.mode"),
        ({"improve_prob": 2}, "task.options.improve_prob"),
    ],
)
def test_bad_options_name_the_key(values, where):
    with pytest.raises(ConfigError, match=where):
        options(**values)


def test_suite_tasks_and_factory(tmp_path):
    values = {
        "instrumenter": "rules",
        "held_out": ["iris-species", "wine-cultivar"],
        "train": ["travel-mode-choice"],
        "train_repeats": 2,
        "eval_repeats": 3,
        "data_root": str(tmp_path),
    }
    suite = build_suite("mle", values, SuiteContext(seed=3, failure_reward=-2.0))
    assert [t.task_id for t in suite.train_tasks] == ["travel-mode-choice"] * 2
    assert all(
        t.data == {"competition": "travel-mode-choice", "split": "train"} for t in suite.train_tasks
    )
    assert [t.task_id for t in suite.eval_tasks] == [
        "iris-species#0",
        "iris-species#1",
        "iris-species#2",
        "wine-cultivar#0",
        "wine-cultivar#1",
        "wine-cultivar#2",
    ]
    assert {t.data["split"] for t in suite.eval_tasks} == {"eval"}
    service = ModelService()
    first, second = suite.make_env(service), suite.make_env(service)
    assert isinstance(first, MleEnv) and first is not second
    assert first.buffer is second.buffer  # one solution buffer per suite
    assert first.instrumenter is None  # rules: no model
    assert first.env_failure_reward == -2.0  # sandbox failures cost rollout.failure_reward
    assert (tmp_path / "iris-species" / "prepared" / "public" / "train.csv").is_file()
    start = first.reset(suite.eval_tasks[0], seed=0)
    assert start.messages[0]["role"] == "system" and start.messages[-1]["role"] == "user"
    assert "Iris" in start.messages[-1]["content"] and "model = " in start.messages[-1]["content"]
    assert suite.load_state is not None and suite.state()["tasks"] == {}


class RecordingService:
    """Stands in for the run's ModelService: records the specs asked for."""

    def __init__(self):
        self.specs: list[str] = []

    def client(self, spec):
        self.specs.append(spec)
        return None if spec == "rules" else object()


def test_factory_asks_the_service_for_the_instrumenter(tmp_path):
    opts = options(
        held_out=["iris-species"], train=["wine-cultivar"], data_root=str(tmp_path), mode="script"
    )
    assert opts.instrumenter == "base"  # the policy's frozen base, by default
    suite = mle_suite(opts, SuiteContext())
    service = RecordingService()
    env = suite.make_env(service)
    assert service.specs == ["base"] and env.instrumenter.client is not None


@pytest.mark.parametrize(
    "spec", ["gpt", "policy_base", "local:", "openai:http://x", "policy", "local:/no/such/model"]
)
def test_bad_instrumenter_fails_at_suite_build(tmp_path, spec):
    values = {
        "instrumenter": spec,
        "held_out": ["iris-species"],
        "train": ["wine-cultivar"],
        "data_root": str(tmp_path),
    }
    with pytest.raises(ConfigError, match="config error at task.options.instrumenter"):
        build_suite("mle", values, SuiteContext())


@pytest.mark.parametrize("mode", ["template", "section"])
def test_template_mode_needs_templates_for_every_competition(tmp_path, mode):
    # a copy of iris-species without target_columns: no template can be built for it
    folder = tmp_path / "comps"
    source = bundled_dir() / "iris-species"
    target = folder / "iris-no-template"
    target.mkdir(parents=True)
    for f in source.iterdir():
        if f.is_file():
            (target / f.name).write_bytes(f.read_bytes())
    config = (target / "config.yaml").read_text()
    config = config.replace("id: iris-species", "id: iris-no-template")
    config = config.replace("target_columns: [species]", "target_columns: []")
    (target / "config.yaml").write_text(config)
    values = {
        "held_out": ["iris-no-template"],
        "train": ["wine-cultivar"],
        "mode": mode,
        "instrumenter": "rules",
        "competitions_dirs": [str(folder)],
        "data_root": str(tmp_path / "data"),
    }
    with pytest.raises(
        ConfigError, match=f"task.options.mode: competition 'iris-no-template' has no {mode} script"
    ):
        build_suite("mle", values, SuiteContext())


def test_section_config_loads_with_its_options():
    from practicum.config import load_config

    root = Path(__file__).resolve().parents[3]
    cfg = load_config(str(root / "configs" / "mle_section.yaml"), [])
    options = MleOptions(**cfg.task.options)
    assert options.mode == "section" and options.instrumenter == "rules"
    assert cfg.sampling.max_new_tokens >= 256 and cfg.rollout.max_seq_len >= 2048
