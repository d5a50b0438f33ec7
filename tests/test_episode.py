"""Token-exact episodes: rows per segment, the loss mask on sampled ids only, old files load."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from practicum.episode import Episode, Turn

ids = st.lists(st.integers(0, 50_000), max_size=12)


@st.composite
def episodes(draw):
    """Episodes whose turns sometimes start a new segment (a fresh context)."""
    prompt = draw(st.lists(st.integers(0, 50_000), min_size=1, max_size=12))
    turns = []
    for _ in range(draw(st.integers(0, 5))):
        sampled = draw(ids)
        fresh = draw(st.booleans())
        context = draw(st.lists(st.integers(0, 50_000), min_size=1, max_size=8)) if fresh else None
        lps = [-float(i % 7) / 3 for i in range(len(sampled))]
        turns.append(
            Turn(
                sampled,
                lps,
                draw(st.integers(0, 5)),
                observation_ids=draw(ids),
                context_ids=context,
                env_duration=draw(st.floats(0, 100)),
            )
        )
    return Episode("t", "g", prompt, turns, reward=draw(st.floats(-10, 10)))


def expected_rows(ep: Episode) -> list[tuple[list[int], list[int]]]:
    """(input ids, sampled ids) of each segment, built the obvious way."""
    rows, ids, sampled = [], list(ep.prompt_ids), []
    for t in ep.turns:
        if t.context_ids is not None:
            rows.append((ids, sampled))
            ids, sampled = list(t.context_ids), []
        ids = ids + t.sampled_ids + t.observation_ids
        sampled = sampled + t.sampled_ids
    rows.append((ids, sampled))
    return [r for r in rows if r[1]]


@given(episodes())
def test_each_segment_is_its_context_plus_sampled_plus_observations(ep):
    got = ep.segments()
    assert [s.input_ids for s in got] == [ids for ids, _ in expected_rows(ep)]


@given(episodes())
def test_loss_mask_covers_exactly_the_sampled_ids_of_each_row(ep):
    for seg, (_, sampled) in zip(ep.segments(), expected_rows(ep)):
        assert (
            len(seg.loss_mask)
            == len(seg.input_ids)
            == len(seg.behaviour_logprobs)
            == len(seg.turn_index)
        )
        assert [i for i, m in zip(seg.input_ids, seg.loss_mask) if m] == sampled
    assert sum(sum(s.loss_mask) for s in ep.segments()) == ep.num_sampled


@given(episodes())
def test_behaviour_logprobs_and_turn_index_align_with_sampled_positions(ep):
    lps = [x for s in ep.segments() for x, m in zip(s.behaviour_logprobs, s.loss_mask) if m]
    assert lps == [x for t in ep.turns for x in t.logprobs]
    owners = [k for s in ep.segments() for k, m in zip(s.turn_index, s.loss_mask) if m]
    assert owners == [k for k, t in enumerate(ep.turns) for _ in t.sampled_ids]


def test_a_turn_with_a_context_starts_a_new_row():
    ep = Episode(
        "t",
        "g",
        [1, 2],
        [
            Turn([10], [-0.1], 0, observation_ids=[20]),
            Turn([11], [-0.2], 0, observation_ids=[21]),  # continues: [1, 2, 10, 20, 11, 21]
            Turn([12, 13], [-0.3, -0.4], 1, context_ids=[5, 6, 7]),  # new row: [5, 6, 7, 12, 13]
        ],
    )
    rows = ep.segments()
    assert [r.input_ids for r in rows] == [[1, 2, 10, 20, 11, 21], [5, 6, 7, 12, 13]]
    assert [r.loss_mask for r in rows] == [[0, 0, 1, 0, 1, 0], [0, 0, 0, 1, 1]]
    assert [r.turn_index for r in rows] == [[-1, -1, 0, -1, 1, -1], [-1, -1, -1, 2, 2]]


@given(episodes())
def test_json_round_trip_is_exact(ep):
    assert Episode.from_json(ep.to_json()) == ep


def test_episode_files_written_before_segments_still_load():
    old = {
        "task_id": "t",
        "group_id": "s0r0/t",
        "prompt_ids": [1, 2],
        "reward": 1.0,
        "truncated": False,
        "overlong": False,
        "failure": None,
        "episode_id": "e",
        "info": {"step": 0},
        "turns": [
            {
                "sampled_ids": [3],
                "logprobs": [-0.5],
                "policy_version": 0,
                "observation_ids": [4],
                "action_text": "x",
                "observation_text": "y",
                "env_duration": 0.1,
                "reward": 0.0,
                "info": {"finish_reason": "length"},
            }
        ],
    }
    ep = Episode.from_json(json.dumps(old))
    assert ep.turns[0].finish_reason == "length" and ep.turns[0].cut
    assert ep.segments()[0].input_ids == [1, 2, 3, 4] and ep.solved is None


def test_turn_rejects_mismatched_logprobs():
    with pytest.raises(ValueError, match="log-probs"):
        Turn([1, 2], [0.0], 0)


def test_a_turns_grammar_survives_json_and_older_files_load_without_one():
    ep = Episode(
        "t",
        "g",
        [1, 2],
        [
            Turn([3, 4], [-0.1, -0.2], 0, observation_ids=[9], grammar="start: /[a-z]+/"),
            Turn([5], [-0.3], 0),
        ],
    )
    back = Episode.from_json(ep.to_json())
    assert [t.grammar for t in back.turns] == ["start: /[a-z]+/", None]
    assert back.segments()[0].constrained == [(2, 4, "start: /[a-z]+/")]
    old = json.loads(ep.to_json())
    for t in old["turns"]:
        del t["grammar"]
    assert [t.grammar for t in Episode.from_dict(old).turns] == [None, None]


def test_an_untrained_turn_stays_in_the_row_as_context_only():
    ep = Episode("t", "g", prompt_ids=[1, 2])
    ep.turns = [
        Turn([3, 4], [-0.1, -0.2], 0, observation_ids=[5], trained=False),
        Turn([6], [-0.3], 1),
    ]
    (row,) = ep.segments()
    assert row.input_ids == [1, 2, 3, 4, 5, 6]
    assert row.loss_mask == [0, 0, 0, 0, 0, 1]
    assert row.turn_index == [-1, -1, -1, -1, -1, 1]
    assert row.behaviour_logprobs[-1] == -0.3 and not any(row.behaviour_logprobs[:-1])
    ep.turns[1].trained = False
    assert ep.segments() == []  # nothing left to train on
    assert Episode.from_json(ep.to_json()).turns[0].trained is False
