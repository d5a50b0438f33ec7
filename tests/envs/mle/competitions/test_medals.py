"""MLE-bench's medal rule, checked by hand at N = 50, 150, 500 and 2000 teams."""

import pytest

from practicum.envs.mle.competitions.medals import (
    above_median,
    medal_for,
    medal_positions,
    medal_thresholds,
)


@pytest.mark.parametrize(
    "n, expected",
    [
        (50, (5, 10, 20)),  # N < 100: 0.1 N, 0.2 N, 0.4 N
        (150, (10, 30, 60)),  # 100 <= N < 250: 10, 0.2 N, 0.4 N
        (500, (11, 50, 100)),  # 250 <= N < 1000: 10 + 0.002 N, 50, 100
        (2000, (14, 100, 200)),  # N >= 1000: 10 + 0.002 N, 0.05 N, 0.1 N
        (99, (9, 19, 39)),  # floors
        (249, (10, 49, 99)),
        (999, (11, 50, 100)),
        (3, (1, 1, 1)),  # tiny leaderboards stay defined (max(1, .))
    ],
)
def test_medal_positions(n, expected):
    assert medal_positions(n) == expected


def test_medal_positions_needs_a_team():
    with pytest.raises(ValueError):
        medal_positions(0)


def test_thresholds_are_scores_at_the_positions_higher_is_better():
    scores = [1000 - i for i in range(150)]  # position p has score 1001 - p
    t = medal_thresholds(scores)
    assert (t["gold"], t["silver"], t["bronze"]) == (991, 971, 941)
    assert t["median"] == pytest.approx(925.5)
    assert t["n_teams"] == 150 and t["lower_is_better"] is False
    assert t["positions"] == {"gold": 10, "silver": 30, "bronze": 60}


def test_thresholds_lower_is_better_n2000():
    scores = [i / 1000 for i in range(1, 2001)]  # best 0.001 first
    t = medal_thresholds(scores)
    assert (t["gold"], t["silver"], t["bronze"]) == (0.014, 0.1, 0.2)
    assert t["lower_is_better"] is True


def test_medal_for_both_directions_and_ties():
    t = {"gold": 0.9, "silver": 0.8, "bronze": 0.7, "median": 0.6}
    assert medal_for(0.95, t, lower_is_better=False) == "gold"
    assert medal_for(0.9, t, lower_is_better=False) == "gold"  # reaching a threshold counts
    assert medal_for(0.75, t, lower_is_better=False) == "bronze"
    assert medal_for(0.65, t, lower_is_better=False) is None
    low = {"gold": 0.1, "silver": 0.2, "bronze": 0.3, "median": 0.5}
    assert medal_for(0.15, low, lower_is_better=True) == "silver"
    assert medal_for(0.4, low, lower_is_better=True) is None


def test_above_median_is_strict():
    t = {"median": 0.5}
    assert above_median(0.51, t, False) and not above_median(0.5, t, False)
    assert above_median(0.49, t, True) and not above_median(0.5, t, True)
