from hypothesis import given
from hypothesis import strategies as st

from practicum.episode import Episode, Turn

ids = st.lists(st.integers(0, 50_000), max_size=12)


@st.composite
def episodes(draw):
    prompt = draw(st.lists(st.integers(0, 50_000), min_size=1, max_size=12))
    turns = []
    for _ in range(draw(st.integers(0, 4))):
        sampled = draw(ids)
        lps = [-float(i % 7) / 3 for i in range(len(sampled))]
        turns.append(Turn(sampled, lps, draw(st.integers(0, 5)), observation_ids=draw(ids),
                          env_duration=draw(st.floats(0, 100))))
    return Episode("t", "g", prompt, turns, reward=draw(st.floats(-10, 10)))


@given(episodes())
def test_input_ids_are_prompt_plus_sampled_plus_observations(ep):
    expected = list(ep.prompt_ids)
    for t in ep.turns:
        expected += t.sampled_ids + t.observation_ids
    assert ep.input_ids() == expected


@given(episodes())
def test_loss_mask_covers_exactly_the_sampled_ids(ep):
    ids, mask = ep.input_ids(), ep.loss_mask()
    assert len(mask) == len(ids) == len(ep.behaviour_logprobs()) == len(ep.turn_index())
    assert [i for i, m in zip(ids, mask) if m] == [i for t in ep.turns for i in t.sampled_ids]
    assert sum(mask) == ep.num_sampled


@given(episodes())
def test_behaviour_logprobs_align_with_sampled_positions(ep):
    lp = [x for x, m in zip(ep.behaviour_logprobs(), ep.loss_mask()) if m]
    assert lp == [x for t in ep.turns for x in t.logprobs]


@given(episodes())
def test_json_round_trip_is_exact(ep):
    back = Episode.from_json(ep.to_json())
    assert back == ep


def test_turn_rejects_mismatched_logprobs():
    import pytest

    with pytest.raises(ValueError, match="log-probs"):
        Turn([1, 2], [0.0], 0)
