"""runtime/rft.py, `practicum rft`: sample k episodes per task, keep the solved ones, SFT on their
clean policy tokens, save an adapter RL can start from; resumable and not redone."""

import json

from practicum.config import load_config
from practicum.runtime.rft import run_rft
from practicum.store import EpisodeStore


def rft_overrides(model_dir, out):
    """Toy task: a reply whose letters are mostly a-m (reward >= 0.6) counts as solved."""
    return [
        f"model.model={model_dir}",
        "model.dtype=float32",
        "task.name=toy",
        "task.options.train_size=6",
        "task.options.eval_size=4",
        "sampling.max_new_tokens=6",
        "rollout.max_turns=1",
        "rollout.group_size=4",
        "rollout.tasks_per_step=2",
        "rft.samples_per_task=4",
        "rft.min_reward=0.6",
        "rft.epochs=3",
        "rft.lr=3e-3",
        "rft.batch_size=4",
        "algo.mask_overlong=false",
        f"run.out_dir={out}",
        "run.name=r",
    ]


def test_rft_keeps_solved_episodes_and_fits_them(tiny_model_dir, tmp_path, capsys):
    cfg = load_config(None, rft_overrides(tiny_model_dir, tmp_path))
    summary = run_rft(cfg, progress=True)
    out = tmp_path / "r" / "rft"
    printed = capsys.readouterr().out  # not a terminal: plain lines, also in progress.log
    for line in [
        "evaluating (before rft) 0/4",
        "evaluating (before rft) 4/4",
        "eval step 0 (before rft)",
        "rft sample 0/24",
        "rft sample 24/24  reward ",
        "eval step 0 (after rft)",
    ]:
        assert line in printed and line in (out / "progress.log").read_text(), line
    episodes = list(EpisodeStore(out / "episodes.jsonl"))
    solved = [e for e in episodes if e.reward >= 0.6]
    assert summary["sampled"] == len(episodes) == 6 * 4
    assert summary["kept"] == len(solved) > 0
    assert summary["sft_loss_last"] < summary["sft_loss_first"]  # it fits what it kept
    assert (out / "policy" / "adapter_config.json").is_file()
    assert summary["eval_before"]["tasks"] == summary["eval_after"]["tasks"] == 4
    # done once: a second call returns the summary without sampling again
    assert run_rft(cfg, progress=False) == json.loads((out / "summary.json").read_text())
    assert len(EpisodeStore(out / "episodes.jsonl")) == len(episodes)


def test_nothing_kept_reuses_the_before_evaluation(tiny_model_dir, tmp_path):
    """No episode reaches min_reward: the adapter is unchanged, so 'after' is the 'before'
    evaluation written again (same numbers), not a second pass over the held-out tasks."""
    overrides = rft_overrides(tiny_model_dir, tmp_path) + [
        "rft.min_reward=2.0",
        "task.options.train_size=2",
    ]
    summary = run_rft(load_config(None, overrides), progress=False)
    out = tmp_path / "r" / "rft" / "eval"
    before, after = (json.loads((out / f"{x}.json").read_text()) for x in ("before", "after"))
    assert summary["kept"] == 0 and summary["sft_updates"] == 0
    assert after["label"] == "after" and "no episode kept" in after["reused_from"]
    assert after["episodes"] == before["episodes"]
    assert summary["eval_after"]["solved_rate"] == summary["eval_before"]["solved_rate"]
