import json

import pytest

from practicum.algo.curriculum import SolveRateTracker


def tracker_with(task_id, outcomes):
    tracker = SolveRateTracker()
    for solved in outcomes:
        tracker.update(task_id, solved)
    return tracker


def test_solve_rate_counts_successes_over_attempts():
    t = tracker_with("a", [True, False, False, True])
    assert (t.attempts("a"), t.successes("a")) == (4, 2)
    assert t.solve_rate("a") == 0.5


def test_unseen_task_has_rate_zero_and_is_kept():
    t = SolveRateTracker()
    assert t.solve_rate("new") == 0.0
    assert t.keep("new")


def test_easy_task_is_dropped_after_enough_attempts():
    # 7/8 = 0.875 > 2/3
    assert not tracker_with("a", [True] * 7 + [False]).keep("a")


def test_easy_task_is_kept_before_enough_attempts():
    assert tracker_with("a", [True] * 3).keep("a")


def test_rate_exactly_at_threshold_is_kept():
    # 6/9 = 2/3 is not above 2/3
    assert tracker_with("a", [True] * 6 + [False] * 3).keep("a")


def test_never_solved_task_is_dropped_after_min_attempts():
    assert tracker_with("a", [False] * 7).keep("a")
    assert not tracker_with("a", [False] * 8).keep("a")


def test_rarely_solved_task_is_kept():
    assert tracker_with("a", [False] * 20 + [True]).keep("a")


def test_state_round_trips_through_json():
    t = tracker_with("a", [True, False])
    t.update("b", False)
    restored = SolveRateTracker()
    restored.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert restored.state_dict() == t.state_dict()
    assert restored.solve_rate("a") == 0.5 and restored.attempts("b") == 1


def test_load_rejects_inconsistent_counts():
    with pytest.raises(ValueError, match="'a'"):
        SolveRateTracker().load_state_dict({"tasks": {"a": {"attempts": 1, "successes": 2}}})


def test_rule_reads_the_configured_rate_and_attempts():
    # the stage refresh's config: min_attempts 4, max_solve_rate 0.75
    assert not tracker_with("a", [False] * 4).keep("a", 0.75, 4)
    assert not tracker_with("a", [True] * 4).keep("a", 0.75, 4)
    assert tracker_with("a", [True] * 3 + [False]).keep("a", 0.75, 4)
    assert tracker_with("a", [False] * 3).keep("a", 0.75, 4)
