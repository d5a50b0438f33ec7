"""batch.py: episodes -> shaped rewards -> per-turn advantages and weights -> token tensors."""

import pytest
import torch

from practicum.algo.baselines import TaskBaselines
from practicum.batch import (
    group_index,
    shaped_rewards,
    train_rows,
    trainable,
    training_rows,
    turn_advantages,
    turn_duration_weights,
)
from practicum.config import AlgoConfig
from practicum.learner.rows import pad_rows, token_batch
from tests.episodes import episode, turn


def sampled(n):
    return turn([2] * n)


def split(values):
    return [v.tolist() for v in values]


def assert_ragged_close(values, expected, atol=1e-6):
    """Per-episode tensors equal, to atol, the expected per-episode lists."""
    assert [len(v) for v in values] == [len(e) for e in expected]
    flat = [x for e in expected for x in e]
    assert torch.allclose(torch.cat(values).float(), torch.tensor(flat), atol=atol)


# -- shaped_rewards -------------------------------------------------------------------------------
def test_shaped_rewards_without_shaping_are_the_final_rewards():
    eps = [episode(1.0, [sampled(40)]), episode(-0.5, [sampled(1)] * 5)]
    assert shaped_rewards(eps, AlgoConfig(), response_budget=4).tolist() == [1.0, -0.5]


def test_soft_overlong_penalty_counts_sampled_tokens_of_every_turn():
    # budget 4, cache 2: no penalty up to 4 - 2 = 2 tokens, then (2 - L) / 2, -1 past 4.
    # L = 2 -> 0;  L = 1 + 2 = 3 -> -0.5;  L = 4 -> -1;  L = 5 -> -1
    eps = [
        episode(1.0, [sampled(2)]),
        episode(1.0, [sampled(1), sampled(2)]),
        episode(1.0, [sampled(2), sampled(2)]),
        episode(1.0, [sampled(5)]),
    ]
    r = shaped_rewards(eps, AlgoConfig(overlong_cache=2), response_budget=4)
    assert r.tolist() == [1.0, 0.5, 0.0, 0.0]


def test_overlong_cache_wider_than_the_budget_is_cut_to_the_budget():
    # cache 10 > budget 4 -> cache 4: the ramp starts at 0 tokens; L = 2 -> (0 - 2) / 4 = -0.5
    r = shaped_rewards(
        [episode(1.0, [sampled(2)])], AlgoConfig(overlong_cache=10), response_budget=4
    )
    assert r.tolist() == [0.5]


def test_step_penalty_charges_turns_past_the_budget():
    # budget 1, 0.25 per extra turn: 1 turn -> 0, 3 turns -> -0.5
    eps = [episode(1.0, [sampled(1)]), episode(1.0, [sampled(1)] * 3)]
    r = shaped_rewards(eps, AlgoConfig(step_budget=1, step_penalty=0.25), response_budget=99)
    assert r.tolist() == [1.0, 0.5]


def test_step_penalty_is_off_without_a_budget():
    eps = [episode(1.0, [sampled(1)] * 3)]
    r = shaped_rewards(eps, AlgoConfig(step_budget=0, step_penalty=0.25), response_budget=99)
    assert r.tolist() == [1.0]


# -- advantages -----------------------------------------------------------------------------------
def test_group_index_numbers_groups_in_order_of_first_appearance():
    eps = [episode(0, [], group=g) for g in ("b", "a", "b", "c")]
    assert group_index(eps).tolist() == [0, 1, 0, 2]


@pytest.mark.parametrize("scale_by_std, a", [(True, 0.70710678), (False, 0.5)])
def test_grpo_gives_the_episode_advantage_to_each_of_its_turns(scale_by_std, a):
    # rewards 1, 0: mean 0.5, unbiased std 0.7071 -> +-0.7071 scaled, +-0.5 centred only
    eps = [episode(1.0, [sampled(1), sampled(1)]), episode(0.0, [sampled(1)])]
    adv = turn_advantages(
        eps, torch.tensor([1.0, 0.0]), AlgoConfig(advantage="grpo", scale_by_std=scale_by_std)
    )
    assert_ragged_close(adv, [[a, a], [-a]])


def test_grpo_normalises_each_group_separately():
    # group g: 1, 0 -> +-0.5;  group h: 3 alone -> 0
    eps = [
        episode(1.0, [sampled(1)]),
        episode(0.0, [sampled(1)]),
        episode(3.0, [sampled(1)], group="h"),
    ]
    adv = turn_advantages(
        eps, torch.tensor([1.0, 0.0, 3.0]), AlgoConfig(advantage="grpo", scale_by_std=False)
    )
    assert split(adv) == [[0.5], [-0.5], [0.0]]


def test_rloo_compares_each_episode_with_the_others_of_its_group():
    # 1 - mean(0, .5) = .75;  0 - mean(1, .5) = -.75;  .5 - mean(1, 0) = 0
    eps = [episode(r, [sampled(1)]) for r in (1.0, 0.0, 0.5)]
    adv = turn_advantages(eps, torch.tensor([1.0, 0.0, 0.5]), AlgoConfig(advantage="rloo"))
    assert split(adv) == [[0.75], [-0.75], [0.0]]


def test_flow_grpo_makes_every_turn_a_sample_of_its_group():
    # group g turn-samples: 1, 1 (2 turns), 0 (1 turn); the failed turnless episode adds none.
    # mean 2/3, unbiased var (1/9 + 1/9 + 4/9) / 2 = 1/3, std .57735
    #   -> (1/3) / .57735 = .57735,  (-2/3) / .57735 = -1.15470
    # (were the turnless episode a sample: mean .5, std .57735 -> +-.86603)
    # group h: one episode, two equal turn-samples -> 0, 0
    eps = [
        episode(1.0, [sampled(1), sampled(1)]),
        episode(0.0, [sampled(1)]),
        episode(0.0, []),
        episode(5.0, [sampled(1), sampled(1)], group="h"),
    ]
    eps[2].failure = "environment crashed"
    adv = turn_advantages(
        eps,
        torch.tensor([1.0, 0.0, 0.0, 5.0]),
        AlgoConfig(advantage="flow_grpo", scale_by_std=True),
    )
    assert_ragged_close(adv, [[0.57735, 0.57735], [-1.15470], [], [0.0, 0.0]], atol=1e-4)


def test_flow_grpo_without_std_scaling_only_centres():
    # turn-samples 1, 1, 0: mean 2/3 -> 1/3, 1/3, -2/3
    eps = [episode(1.0, [sampled(1), sampled(1)]), episode(0.0, [sampled(1)])]
    adv = turn_advantages(
        eps, torch.tensor([1.0, 0.0]), AlgoConfig(advantage="flow_grpo", scale_by_std=False)
    )
    assert_ragged_close(adv, [[1 / 3, 1 / 3], [-2 / 3]])


def test_baseline_advantage_subtracts_the_task_running_mean():
    # task a's history 1, 0 -> b = .5;  task z has none -> mean of all history .5
    baselines = TaskBaselines()
    baselines.update(["a", "a"], [1.0, 0.0])
    eps = [episode(1.0, [sampled(1), sampled(1)], task="a"), episode(0.0, [sampled(1)], task="z")]
    adv = turn_advantages(
        eps, torch.tensor([1.0, 0.0]), AlgoConfig(advantage="baseline"), baselines
    )
    assert split(adv) == [[0.5, 0.5], [-0.5]]


def test_baseline_advantage_needs_the_baselines():
    with pytest.raises(ValueError, match="TaskBaselines"):
        turn_advantages(
            [episode(1.0, [sampled(1)])], torch.tensor([1.0]), AlgoConfig(advantage="baseline")
        )


# -- duration weights -----------------------------------------------------------------------------
def test_duration_weights_are_per_turn_with_floor_and_cap():
    # dt 1, 3 | 0.01 -> floor 0.05 | 6: mean (1 + 3 + .05 + 6) / 4 = 2.5125
    #   -> .39801, 1.19403 | .01990 | 2.38806 capped at 2
    eps = [
        episode(1, [turn([2], dt=1.0), turn([2], dt=3.0)]),
        episode(0, [turn([2], dt=0.01)]),
        episode(0, []),
        episode(0, [turn([2], dt=6.0)]),
    ]
    w = turn_duration_weights(eps, AlgoConfig(duration_weights=True, duration_cap=2.0))
    assert_ragged_close(w, [[0.39801, 1.19403], [0.01990], [], [2.0]], atol=1e-5)


def test_duration_weights_average_over_the_trained_turns_only():
    # the masked episode's 100 s does not count: mean of (1, 3) = 2 -> 0.5, 1.5
    eps = [episode(1, [turn([2], dt=1.0), turn([2], dt=3.0)]), episode(0, [turn([2], dt=100.0)])]
    w = turn_duration_weights(eps, AlgoConfig(duration_weights=True), include=[True, False])
    assert_ragged_close(w, [[0.5, 1.5], [1.0]], atol=1e-6)


def test_duration_weights_off_are_ones():
    eps = [episode(1, [turn([2], dt=1.0), turn([2], dt=3.0)]), episode(0, [turn([2], dt=9.0)])]
    w = turn_duration_weights(eps, AlgoConfig(duration_weights=False))
    assert split(w) == [[1.0, 1.0], [1.0]]


def test_duration_weights_of_a_batch_without_turns_are_empty():
    w = turn_duration_weights([episode(0, [])], AlgoConfig(duration_weights=True))
    assert split(w) == [[]]


# -- which episodes train -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "mask_overlong, expected", [(True, [True, False, False]), (False, [True, True, False])]
)
def test_trainable_drops_empty_and_masked_overlong_episodes(mask_overlong, expected):
    eps = [episode(1, [sampled(1)]), episode(1, [sampled(3)], overlong=True), episode(1, [])]
    assert trainable(eps, AlgoConfig(mask_overlong=mask_overlong)) == expected


# -- rows -----------------------------------------------------------------------------------------
def three_turns_two_segments():
    """prompt 1 2 | t0 samples 3 4, observes 5 | t1 restarts from context 6, samples 7,
    observes 8 | t2 samples 9."""
    return episode(
        1.0,
        [
            turn([3, 4], [-0.1, -0.2], obs=[5], dt=1.0),
            turn([7], [-0.3], obs=[8], context=[6], dt=2.0),
            turn([9], [-0.4], dt=3.0),
        ],
        prompt=(1, 2),
    )


def test_a_turn_with_context_starts_a_new_token_exact_row():
    rows = training_rows([three_turns_two_segments()], [True])
    assert [r.segment.input_ids for r in rows] == [[1, 2, 3, 4, 5], [6, 7, 8, 9]]
    assert [r.segment.loss_mask for r in rows] == [[0, 0, 1, 1, 0], [0, 1, 0, 1]]
    assert [r.segment.behaviour_logprobs for r in rows] == [
        [0, 0, -0.1, -0.2, 0],
        [0, -0.3, 0, -0.4],
    ]
    assert [r.segment.turn_index for r in rows] == [[-1, -1, 0, 0, -1], [-1, 1, -1, 2]]
    assert [r.tokens for r in rows] == [2, 2]


def test_training_rows_keep_batch_indices_and_skip_excluded_episodes():
    eps = [episode(0, [sampled(1)]), three_turns_two_segments(), episode(0, [sampled(2)])]
    rows = training_rows(eps, [False, True, True])
    assert [r.episode for r in rows] == [1, 1, 2]


def test_token_batch_pads_rows_on_the_right():
    rows = training_rows(
        [three_turns_two_segments(), episode(0.0, [turn([2], [-0.5])])], [True, True]
    )
    tb = token_batch(
        train_rows(rows, [torch.zeros(3), torch.zeros(1)], [torch.ones(3), torch.ones(1)]),
        pad_id=99,
    )
    assert tb.input_ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 99], [1, 2, 99, 99, 99]]
    assert tb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]
    assert tb.loss_mask.tolist() == [[0, 0, 1, 1, 0], [0, 1, 0, 1, 0], [0, 1, 0, 0, 0]]
    assert torch.allclose(
        tb.behaviour_logp,
        torch.tensor([[0, 0, -0.1, -0.2, 0], [0, -0.3, 0, -0.4, 0], [0, -0.5, 0, 0, 0]]),
    )


def test_token_batch_puts_each_turn_value_on_that_turn_sampled_tokens():
    # episode 0: turn 0 -> positions 2, 3 of row 0; turns 1, 2 -> positions 1, 3 of row 1.
    # episode 1: turn 0 -> position 1 of row 2.  Everything else (prompt, observations,
    # padding) gets 0.
    rows = training_rows([three_turns_two_segments(), episode(0.0, [turn([2])])], [True, True])
    tb = token_batch(
        train_rows(
            rows,
            [torch.tensor([10.0, 11.0, 12.0]), torch.tensor([20.0])],
            [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0])],
        ),
        pad_id=99,
    )
    assert tb.advantages.tolist() == [[0, 0, 10, 10, 0], [0, 11, 0, 12, 0], [0, 20, 0, 0, 0]]
    assert tb.weights.tolist() == [[0, 0, 1, 1, 0], [0, 2, 0, 3, 0], [0, 4, 0, 0, 0]]


def test_pad_rows_stacks_and_zero_pads():
    out = pad_rows([torch.tensor([1.0, 2.0]), torch.tensor([3.0])], width=3)
    assert out.tolist() == [[1, 2, 0], [3, 0, 0]]


# -- grammar masks --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_token_batch_replays_the_grammar_of_constrained_turns_only(tokenizer):
    from practicum.engine.constraint import grammars_for

    word = "start: /[a-z]{1,8}/"
    reply = tokenizer("hello", add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    constrained = turn(reply, obs=[7, 8])
    constrained.grammar = word
    eps = [episode(1.0, [constrained, turn([5, 6])], prompt=(1, 2)), episode(0.0, [turn([3])])]
    rows = training_rows(eps, [True, True])
    tb = token_batch(
        train_rows(rows, [torch.zeros(2), torch.zeros(1)], [torch.ones(2), torch.ones(1)]),
        pad_id=0,
        tokenizer=tokenizer,
    )
    n = len(reply)
    g = grammars_for(tokenizer)
    assert tb.allowed.positions.tolist() == list(range(2, 2 + n))  # the reply's only
    allowed = tb.allowed.dense()
    assert allowed.shape == (2, 2 + n + 4, g.width) and allowed.dtype == torch.int32
    assert torch.equal(allowed[0, 2 : 2 + n], g.replay(word, tuple(reply)))
    free = torch.ones(allowed.shape[:2], dtype=torch.bool)
    free[0, 2 : 2 + n] = False
    assert (allowed[free] == -1).all()  # every other position: all tokens allowed
    assert (allowed[0, 2 : 2 + n] != -1).any(dim=-1).all()


def test_token_batch_without_constrained_rows_has_no_masks_and_needs_no_tokenizer():
    rows = training_rows([episode(0.0, [turn([2, 3])])], [True])
    tb = token_batch(train_rows(rows, [torch.zeros(1)], [torch.ones(1)]), pad_id=0)
    assert tb.allowed is None and tb.to("cpu").allowed is None


def test_constrained_rows_without_a_tokenizer_are_refused():
    t = turn([2, 3])
    t.grammar = "start: /[a-z]+/"
    with pytest.raises(ValueError, match="need the tokenizer"):
        token_batch(
            train_rows(
                training_rows([episode(0.0, [t])], [True]), [torch.zeros(1)], [torch.ones(1)]
            ),
            pad_id=0,
        )
