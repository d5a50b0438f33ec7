"""The async runtime: its pieces (group board, weights gate, generation server, ledger) and whole
runs on the tiny model: versions per turn, staleness policies, the ledger, kill and resume."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from practicum.config import load_config
from practicum.engine.base import Sample, SamplingParams
from practicum.envs.base import Task
from practicum.episode import Episode, Turn
from practicum.runtime.generation_server import GenerationServer, WeightsGate
from practicum.runtime.groups import GroupBoard, group_id
from practicum.runtime.ledger import ConsumptionLedger, read_ledger
from practicum.runtime.store import EpisodeStore
from practicum.suites import TaskCursor

TASKS = [Task(f"t{i}") for i in range(3)]


def _episode(gid: str, reward: float = 0.0, version: int = 0) -> Episode:
    return Episode(gid.split("/", 1)[1], gid, [1], [Turn([2], [-0.1], version)], reward=reward)


# -- group board ------------------------------------------------------------------------------
def test_board_admission_control_caps_open_groups():
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=2, max_open=2)
    stop = threading.Event()
    got = [board.next_assignment(stop) for _ in range(4)]
    assert [a.slot for a in got] == [0, 1, 0, 1] and len({a.group_id for a in got}) == 2
    blocked = []
    t = threading.Thread(target=lambda: blocked.append(board.next_assignment(stop)))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not blocked  # a third group may not open yet
    for a in got[:2]:
        board.finish(a, _episode(a.group_id), position=0)
    assert board.take(timeout=1).gid == got[0].group_id  # consuming it admits a new group
    t.join(2)
    assert blocked and blocked[0].index == 2


def test_board_hands_out_complete_groups_in_completion_order():
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=2)
    stop = threading.Event()
    a = [board.next_assignment(stop) for _ in range(4)]  # groups g0 (a0, a1) and g1 (a2, a3)
    for x in (a[0], a[2], a[3]):
        board.finish(x, _episode(x.group_id), 0)
    assert board.take(timeout=1).index == 1  # g1 finished first although opened second
    assert board.take(timeout=0.05) is None
    board.finish(a[1], _episode(a[1].group_id), 0)
    assert board.take(timeout=1).index == 0


def test_board_restore_reopens_groups_and_counts_stored_members():
    cursor = TaskCursor(TASKS, seed=0)
    order = [cursor.take(1)[0] for _ in range(3)]
    gids = [group_id(i, t.task_id) for i, t in enumerate(order)]
    cursor.position = 1  # checkpoint: group 0 opened; groups 1 and 2 opened after it
    board = GroupBoard(cursor, group_size=2)
    pending = [(5, _episode(gids[0])), (6, _episode(gids[2])), (7, _episode(gids[2])),
               (8, _episode(gids[2]))]
    surplus = board.restore([(0, order[0].task_id)], pending, {t.task_id: t for t in TASKS})
    assert surplus == [8]  # group 2 already has its two members
    assert board.take(timeout=1).gid == gids[2]  # complete at once
    stop = threading.Event()
    a = board.next_assignment(stop)
    assert (a.group_id, a.slot) == (gids[0], 1)  # the missing member of the restored group
    assert board.next_assignment(stop).group_id == gids[1]  # then the cursor, skipping group 2
    assert board.next_assignment(stop).group_id == gids[1]
    assert board.next_assignment(stop).index == 3


# -- weights gate and generation server --------------------------------------------------------
class FakePolicy:
    """Records batch sizes; sleeps a little per call so overlaps would show."""

    def __init__(self):
        self.version, self.calls, self.active = 0, [], 0

    def generate(self, prompts, params):
        self.active += 1
        assert self.active == 1, "two generate calls at once"
        self.calls.append((len(prompts), self.version))
        time.sleep(0.02)
        self.active -= 1
        return [Sample([len(p)], [-0.5], "x", "stop") for p in prompts]


def test_generation_server_batches_queued_requests_and_reports_versions():
    policy, gate = FakePolicy(), WeightsGate()
    server = GenerationServer(policy, gate, SamplingParams(), batch_window=0.05)
    futures = [server.submit([1] * n) for n in range(1, 5)]  # queued before the server starts
    server.start()
    try:
        results = [f.result(timeout=5) for f in futures]
        assert policy.calls == [(4, 0)]
        assert [s.token_ids for s, _ in results] == [[1], [2], [3], [4]]
        with gate.updating():
            policy.version = 1  # a weight update: no generate call can overlap it
            later = server.submit([7])
            time.sleep(0.1)
            assert not later.done()
        assert later.result(timeout=5)[1] == 1
    finally:
        server.stop()
    with pytest.raises(Exception):
        server.generate([1])


def test_weights_gate_gives_a_waiting_update_priority():
    gate, order = WeightsGate(), []

    def sampler():
        for _ in range(20):
            with gate.sampling():
                time.sleep(0.005)
        order.append("sampler done")

    t = threading.Thread(target=sampler)
    t.start()
    time.sleep(0.02)
    with gate.updating():
        order.append("update")
    t.join()
    assert order == ["update", "sampler done"]


# -- ledger ------------------------------------------------------------------------------------
def test_ledger_watermark_double_consumption_and_resume_cut(tmp_path):
    path = tmp_path / "consumed.jsonl"
    led = ConsumptionLedger(path)
    e = {p: _episode("g0/t0") for p in range(5)}
    led.record(1, trained=[(1, e[1]), (0, e[0])], filtered=[(3, e[3])])
    assert led.watermark == 2 and led.beyond == {3} and led.unconsumed(5) == [2, 4]
    with pytest.raises(RuntimeError, match="position 3 consumed twice"):
        led.record(2, dropped=[(3, e[3])])
    led.record(2, dropped=[(2, e[2])])
    assert led.watermark == 4
    resumed = ConsumptionLedger(path, watermark=2, beyond=[3], step=1)
    assert [r["step"] for r in read_ledger(path)] == [1]
    assert resumed.unconsumed(5) == [2, 4]


# -- whole runs on the tiny model --------------------------------------------------------------
def tiny_overrides(model_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    return [f"model.model={model_dir}", "model.dtype=float32", "task.name=timed_bandit",
            "rollout.group_size=4", "rollout.tasks_per_step=2", "train.steps=3",
            "train.micro_batch_size=8", "eval.every=0", "task.eval_size=2",
            f"run.out_dir={out_dir}", "runtime.mode=async", "runtime.num_actors=4",
            "sampling.max_new_tokens=6",
            "task.options={time_scale: 0.02, fallback_arm: random}", *extra]


def run(model_dir, out_dir, *extra):
    from practicum.runtime.async_ import run_async
    from practicum.runtime.session import open_session
    from practicum.runtime.sync import run_sync

    cfg = load_config(None, tiny_overrides(model_dir, out_dir, *extra))
    s = open_session(cfg)
    summary = (run_async if cfg.runtime.mode == "async" else run_sync)(s, progress=False)
    return cfg, s, summary


def metric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r or "skipped" in r]


def test_async_run_trains_every_stored_episode_once(tiny_model_dir, tmp_path):
    cfg, s, summary = run(tiny_model_dir, tmp_path)
    assert cfg.use_duration_weights  # on by default in async mode
    assert summary["steps"] == 3 and summary["mode"] == "async"
    assert summary["async"]["num_actors"] == 4 and summary["async"]["learner_seconds"] > 0
    stored = list(EpisodeStore(cfg.run_dir / "episodes.jsonl"))
    rows = read_ledger(cfg.run_dir / "consumed.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    consumed = [p for r in rows for k in ("trained", "filtered", "dropped") for p, _ in r[k]]
    assert len(consumed) == len(set(consumed)) >= 3 * 8
    for r in rows:
        for p, eid in r["trained"]:
            assert stored[p].episode_id == eid
    by_group: dict[str, int] = {}
    for p in consumed:
        by_group[stored[p].group_id] = by_group.get(stored[p].group_id, 0) + 1
    assert set(by_group.values()) == {4}  # only complete groups reach the learner
    versions = {t.policy_version for e in stored for t in e.turns}
    assert versions <= {0, 1, 2, 3} and 0 in versions
    for row in metric_rows(cfg.run_dir):
        assert 0 <= row["staleness_mean"] <= row["staleness_max"]
        assert 0 < row["actor_utilisation"] <= 1.0 + 1e-6


def test_drop_policy_never_trains_stale_samples(tiny_model_dir, tmp_path):
    cfg, _, summary = run(tiny_model_dir, tmp_path, "runtime.staleness_policy=drop",
                          "runtime.max_staleness=0", "runtime.num_actors=6")
    assert summary["steps"] == 3
    rows = metric_rows(cfg.run_dir)
    assert all(r["staleness_max"] == 0 for r in rows)


def test_sync_mode_runs_the_same_config(tiny_model_dir, tmp_path):
    cfg, _, summary = run(tiny_model_dir, tmp_path, "runtime.mode=sync", "train.steps=1")
    assert summary["mode"] == "sync" and summary["steps"] == 1
    assert not cfg.use_duration_weights


def latest_extra(run_dir: Path) -> dict | None:
    """The resume state of the run's latest checkpoint (plus its step), None before one."""
    root = run_dir / "checkpoints"
    try:
        state = torch.load(root / (root / "latest").read_text().strip() / "trainer.pt",
                           weights_only=False)
    except (OSError, EOFError, RuntimeError):
        return None
    return {**state["extra"], "step": state["step"]}


def consumed_by(extra: dict) -> set[int]:
    return set(range(extra["consumed"])) | set(extra["consumed_beyond"])


@pytest.mark.slow
def test_killed_async_run_resumes_without_training_anything_twice(tiny_model_dir, tmp_path):
    """SIGKILL a `practicum train ... runtime.mode=async` after its first checkpoint, run the
    same command again: every stored episode is consumed at most once, none below the final
    watermark is skipped, and training reaches the end."""
    script = Path(sys.executable).with_name("practicum")  # the installed `practicum` command
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "practicum.cli"]
    args = [*cmd, "train", "-q",
            *tiny_overrides(tiny_model_dir, tmp_path, "train.steps=6", "train.checkpoint_every=2",
                            "task.options={time_scale: 0.1, fallback_arm: random}")]
    run_dir = tmp_path / "default"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill once a checkpoint exists and the store holds episodes it has not consumed
        deadline = time.time() + 240
        while True:
            assert first.poll() is None, "the first run ended before it could be killed"
            assert time.time() < deadline, "no checkpoint within 240 s"
            extra = latest_extra(run_dir)
            if extra and len(EpisodeStore(run_dir / "episodes.jsonl")) > len(consumed_by(extra)):
                break
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    at_kill = latest_extra(run_dir)
    resume_step = at_kill["step"]
    pending = set(range(len(EpisodeStore(run_dir / "episodes.jsonl")))) - consumed_by(at_kill)
    assert pending
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 6
    stored = list(EpisodeStore(run_dir / "episodes.jsonl"))
    rows = read_ledger(run_dir / "consumed.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    consumed = [(p, eid) for r in rows for k in ("trained", "filtered", "dropped")
                for p, eid in r[k]]
    positions = [p for p, _ in consumed]
    assert len(positions) == len(set(positions))  # nothing trained twice
    assert all(stored[p].episode_id == eid for p, eid in consumed)
    final = latest_extra(run_dir)
    assert final["step"] == 6
    # the resumed run re-read what the killed one had stored but not consumed
    after = {p for r in rows if r["step"] > resume_step for k in ("trained", "filtered", "dropped")
             for p, _ in r[k]}
    open_groups = {group_id(i, t) for i, t in final["open_groups"]}
    assert all(p in after or stored[p].group_id in open_groups for p in pending)
    # nothing skipped: the final checkpoint's view equals the ledger, and every unconsumed
    # stored episode belongs to a group the checkpoint keeps open for the next resume
    assert set(positions) == consumed_by(final)
    assert all(stored[p].group_id in open_groups
               for p in range(len(stored)) if p not in set(positions))
