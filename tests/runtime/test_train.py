"""run_training: what it refuses before a run starts."""

import pytest

from practicum.config import load_config
from practicum.errors import ConfigError
from practicum.runtime.train import check_nucleus, run_training


def test_rl_refuses_top_p_below_one_before_opening_the_run(tmp_path):
    cfg = load_config(None, ["task.name=toy", "sampling.top_p=0.9", f"run.out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"sampling.top_p: RL training needs 1 \(got 0.9\)"):
        run_training(cfg, progress=False)
    assert not any(tmp_path.iterdir())  # nothing was opened or written


def test_greedy_rollouts_and_full_nucleus_are_accepted():
    check_nucleus(
        load_config(None, ["task.name=toy", "sampling.top_p=0.9", "sampling.temperature=0"])
    )
    check_nucleus(load_config(None, ["task.name=toy"]))
