import contextlib
import io

import numpy as np
import pytest

from practicum.envs.mle.credit.milestones import (
    MILESTONES,
    marker_line,
    marker_text,
    new_nonce,
    parse_milestones,
    redact_markers,
)

NONCE = "0123abcd"


def _run(source: str, **names) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(source, dict(names))
    return out.getvalue()


def test_seven_milestones_in_pipeline_order():
    assert list(MILESTONES) == [
        "libraries_imported",
        "data_loaded",
        "features_prepared",
        "model_built",
        "model_trained",
        "validation_scored",
        "predictions_written",
    ]


def test_new_nonce_is_fresh_hex():
    a, b = new_nonce(), new_nonce()
    assert a != b and len(a) == 16 and set(a) <= set("0123456789abcdef")


def test_marker_line_prints_a_marker_the_parser_finds():
    out = _run(marker_line(NONCE, "model_trained"))
    assert out == f"[[PRACTICUM:{NONCE}:model_trained]]\n"
    assert parse_milestones(out, NONCE).reached == ["model_trained"]


def test_marker_line_value_takes_the_mean_of_arrays():
    out = _run(marker_line(NONCE, "validation_scored", "scores"), scores=np.array([0.5, 0.7]))
    assert parse_milestones(out, NONCE).validation_score == pytest.approx(0.6)


def test_marker_text_rejects_unknown_milestone_and_bad_nonce():
    with pytest.raises(ValueError, match="unknown milestone 'model_fitted'"):
        marker_text(NONCE, "model_fitted")
    with pytest.raises(ValueError, match="hex"):
        marker_text("NOT-HEX", "data_loaded")


def test_parse_distinct_in_order_of_first_appearance():
    out = "\n".join(
        [
            f"[[PRACTICUM:{NONCE}:data_loaded]]",
            "fold 1",
            f"[[PRACTICUM:{NONCE}:model_trained]]",
            f"[[PRACTICUM:{NONCE}:data_loaded]]",
            f"[[PRACTICUM:{NONCE}:model_trained]]",
        ]
    )
    assert parse_milestones(out, NONCE).reached == ["data_loaded", "model_trained"]


def test_parse_keeps_last_finite_validation_value():
    out = "\n".join(
        [
            f"[[PRACTICUM:{NONCE}:validation_scored]] value=0.7",
            f"[[PRACTICUM:{NONCE}:validation_scored]] value=0.8",
            f"[[PRACTICUM:{NONCE}:validation_scored]] value=nan",
            f"[[PRACTICUM:{NONCE}:validation_scored]] value=oops",
        ]
    )
    report = parse_milestones(out, NONCE)
    assert report.validation_score == 0.8 and report.reached == ["validation_scored"]


def test_wrong_nonce_markers_are_counted_as_forged_and_earn_nothing():
    out = "\n".join(
        [
            "[[PRACTICUM:deadbeef:model_trained]]",
            "[[PRACTICUM::predictions_written]]",
            f"[[PRACTICUM:{NONCE}:data_loaded]]",
            "[[PRACTICUM:ffff:validation_scored]] value=0.99",
        ]
    )
    report = parse_milestones(out, NONCE)
    assert report.reached == ["data_loaded"]
    assert report.forged == 3
    assert report.validation_score is None


def test_unknown_milestone_with_right_nonce_is_ignored():
    assert parse_milestones(f"[[PRACTICUM:{NONCE}:won_the_competition]]", NONCE).reached == []


def test_redact_markers_hides_every_nonce():
    out = f"a\n[[PRACTICUM:{NONCE}:validation_scored]] value=0.8\n[[PRACTICUM:beef:data_loaded]]"
    redacted = redact_markers(out)
    assert NONCE not in redacted and "beef" not in redacted
    assert redacted == "a\n[milestone: validation_scored value=0.8]\n[milestone: data_loaded]"
