"""benchmarks/long_context.py: the fit it reports, worked out by hand, and a row of stored
episode segments laid back to back."""

import json

import pytest

BENCHMARK = "long_context.py"


def test_fit_gives_the_slope_per_1k_tokens_and_the_growth_exponent(bench):
    # linear with a floor: 100 MB + 0.5 MB per token -> 500 MB per 1k tokens; between 2k and
    # 4k tokens the peak goes 1100 -> 2100 MB: log-log slope log(2100/1100) / log(2) = 0.933
    linear = [
        {"arm": "a", "tokens": t, "peak_above_start_mb": 100 + 0.5 * t} for t in (1000, 2000, 4000)
    ]
    # quadratic: T^2 / 1000 MB -> log-log slope 2 between the two longest
    quadratic = [
        {"arm": "q", "tokens": t, "peak_above_start_mb": t * t / 1000} for t in (1000, 2000, 4000)
    ]
    fits = bench.fit(linear + quadratic + [{"arm": "q", "tokens": 8000, "stopped": "RSS"}])
    assert fits["a"]["mb_per_1k_tokens"] == pytest.approx(500)
    assert fits["a"]["intercept_mb"] == pytest.approx(100)
    assert fits["a"]["loglog_slope_longest"] == pytest.approx(0.9329, abs=1e-4)
    assert fits["q"]["loglog_slope_longest"] == pytest.approx(2.0)


def test_a_swe_row_lays_the_stored_segments_back_to_back(bench, tmp_path):
    episodes = tmp_path / "episodes.json"
    episodes.write_text(
        json.dumps(
            [
                {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]},
                {"input_ids": [4, 5], "loss_mask": [0, 1]},
            ]
        )
    )
    row = bench.swe_row(7, episodes)
    assert row.input_ids == [1, 2, 3, 4, 5, 1, 2]
    assert row.loss_mask == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert row.advantages == row.loss_mask and row.behaviour_logp[1] == -2.0
