"""The consumption ledger: a watermark plus positions beyond it, one row per batch, cut on
resume to the checkpoint's batch."""

import pytest

from practicum.episode import Episode, Turn
from practicum.store import ConsumptionLedger, read_ledger


def _episode(i: int) -> Episode:
    return Episode("t", "g0/t", [1], [Turn([2], [-0.1], 0)], episode_id=f"e{i}")


def test_watermark_rows_and_double_consumption(tmp_path):
    path = tmp_path / "consumed.jsonl"
    led = ConsumptionLedger(path)
    e = {p: _episode(p) for p in range(6)}
    assert led.record(1, trained=[(1, e[1]), (0, e[0])], filtered=[(3, e[3])]) == 1
    assert led.watermark == 2 and led.beyond == {3} and led.unconsumed(6) == [2, 4, 5]
    with pytest.raises(RuntimeError, match="position 3 consumed twice"):
        led.record(2, dropped=[(3, e[3])])
    led.record(1, filtered=[(2, e[2])])  # a batch with nothing trained: same step, new batch
    assert led.watermark == 4 and led.batches == 3
    rows = read_ledger(path)
    assert [(r["batch"], r["step"]) for r in rows] == [(1, 1), (3, 1)]
    assert rows[0]["trained"] == [[1, "e1"], [0, "e0"]] and rows[1]["filtered"] == [[2, "e2"]]


def test_resume_cuts_the_rows_after_the_checkpoint(tmp_path):
    path = tmp_path / "consumed.jsonl"
    led = ConsumptionLedger(path)
    led.record(1, trained=[(0, _episode(0))])
    state = led.state()  # the checkpoint is taken here
    led.record(2, trained=[(1, _episode(1)), (2, _episode(2))])
    resumed = ConsumptionLedger.resume(path, state)
    assert [r["batch"] for r in read_ledger(path)] == [1]
    assert resumed.batches == 1 and resumed.unconsumed(3) == [1, 2]
    assert ConsumptionLedger.resume(tmp_path / "fresh.jsonl", None).watermark == 0


def test_unknown_kinds_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown ledger kinds"):
        ConsumptionLedger(tmp_path / "c.jsonl").record(1, skipped=[])
