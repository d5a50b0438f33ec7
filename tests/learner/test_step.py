"""learner/step.py: the PPO update wired to batch.py and algo/, checked on a bigram stand-in policy.

Most tests start from the all-zero table, where every next-token distribution is uniform over
V = 8 tokens (log-prob U = -log 8), and make one update with ratio 1. The loss is then, to first
order, -sum_t c_t logp_t with c_t = (weight x ratio x advantage / tokens) of token t, and
d logp(x | a) / d table[a] = onehot(x) - 1/8, so the gradient is hand-computable
(`uniform_grad`). Tokens are chosen so that different tokens follow different contexts a and
land in different rows of the table.
"""

import io
import math
import os
import random
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from practicum.algo.baselines import TaskBaselines
from practicum.config import Config
from practicum.engine.base import WeightUpdate
from practicum.episode import Episode, Turn
from practicum.errors import PracticumError
from practicum.learner import Learner, checkpoint, latest_checkpoint, read_trainer_state
from practicum.learner.checkpoint import restore_rng_state, rng_state
from practicum.learner.ranks import Ranks, split_even, split_ranks
from tests import episodes
from tests.episodes import episode
from tests.fake_device import DEVICE, on_fake_device, to_fake_device
from tests.ranks import rl_step, save_format_1

V = 8
U = -math.log(V)
"""Log-prob of any token under the all-zero table."""


class BigramPolicy(nn.Module):
    """A `Trainable` stand-in: the logits predicting token t are row x[t-1] of a [V, V] table."""

    tokenizer = None
    pad_id = 0

    def __init__(self, table: torch.Tensor | None = None):
        super().__init__()
        init = torch.zeros(V, V) if table is None else table.float()
        self.table = nn.Parameter(init.clone())
        self.base = init.clone()
        """The frozen base: the initial table."""
        self.in_base = False
        self.calls: list[str] = []
        """Per token_logprobs call: 'base', 'grad' or 'nograd' (proximal log-probs)."""

    def token_logprobs(
        self,
        input_ids,
        attention_mask,
        temperature=1.0,
        return_entropy=False,
        score_mask=None,
        allowed=None,
        packed=False,
    ):
        assert allowed is None, "no row of these tests is sampled under a grammar"
        self.calls.append(
            "base" if self.in_base else "grad" if torch.is_grad_enabled() else "nograd"
        )
        table = self.base if self.in_base else self.table
        logp_all = torch.log_softmax(table[input_ids[:, :-1]] / temperature, dim=-1)
        logp = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
        valid = (attention_mask[:, 1:] * attention_mask[:, :-1]).bool()
        zero = logp.new_zeros(len(input_ids), 1)
        logp = torch.cat([zero, logp.masked_fill(~valid, 0.0)], dim=1)
        # like HFTrainable: positions outside score_mask are 0, so a learner reading them fails
        scored = torch.ones_like(logp) if score_mask is None else score_mask.float()
        if not return_entropy:
            return logp * scored
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp * scored, torch.cat([zero, entropy.masked_fill(~valid, 0.0)], dim=1) * scored

    def trainable_parameters(self):
        return [self.table]

    @property
    def module(self):
        return self

    @contextmanager
    def frozen_base(self):
        self.in_base = True
        try:
            yield self
        finally:
            self.in_base = False

    def export_weights(self, version):
        return WeightUpdate(version, "full", {"table": self.table.detach()})

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.table.detach().clone(), path / "table.pt")

    def load_weights(self, path: Path) -> None:
        with torch.no_grad():
            self.table.copy_(torch.load(path / "table.pt", map_location="cpu"))


class FakeDeviceBigram(BigramPolicy):
    """BigramPolicy on the fake accelerator (tests/fake_device.py): like HFTrainable, it moves
    its inputs to its own device, and its log-probs live there."""

    def __init__(self, table: torch.Tensor | None = None):
        super().__init__(table)
        self.table = nn.Parameter(to_fake_device(self.table.detach()))
        self.base = to_fake_device(self.base)

    def token_logprobs(
        self,
        input_ids,
        attention_mask,
        temperature=1.0,
        return_entropy=False,
        score_mask=None,
        allowed=None,
        packed=False,
    ):
        def there(t):
            return None if t is None else t.to(DEVICE)

        return super().token_logprobs(
            there(input_ids),
            there(attention_mask),
            temperature,
            return_entropy,
            there(score_mask),
            there(allowed),
            packed,
        )


# -- helpers --------------------------------------------------------------------------------------
TEST_DEFAULTS = {
    # One update per step (the gradient reads directly), no warm-up, grad clip out of the way,
    # advantages centred only (rewards 1, 0 -> +-0.5).
    "train": {"mini_batches": 1, "epochs": 1, "warmup_steps": 0, "grad_clip": 1e9, "lr": 0.1},
    "algo": {"scale_by_std": False},
}


def config(**sections) -> Config:
    tree = {k: dict(v) for k, v in TEST_DEFAULTS.items()}
    for name, fields in sections.items():
        tree.setdefault(name, {}).update(fields)
    return Config.model_validate(tree)


def make_learner(table=None, **sections) -> Learner:
    return Learner(BigramPolicy(table), config(**sections))


def turn(sampled, logprobs=None, **kw):
    """Sampled at the uniform log-prob U unless `logprobs` say otherwise (ratio 1 at the start)."""
    return episodes.turn(sampled, logprobs, logprob=U, **kw)


def uniform_grad(*terms):
    """Gradient at the all-zero table of -sum c * logp(x | a) over terms (a, x, c)."""
    g = torch.zeros(V, V)
    for a, x, c in terms:
        g[a] -= c * (torch.nn.functional.one_hot(torch.tensor(x), V) - 1 / V)
    return g


def grad(learner: Learner) -> torch.Tensor:
    return learner.model.table.grad


def winner_and_loser():
    """Context 1: the winner samples 2 (reward 1, A = +.5), the loser 3 (reward 0, A = -.5)."""
    return [episode(1.0, [turn([2])]), episode(0.0, [turn([3])])]


def mixed_batch():
    """Five rows of unequal length over two groups, one episode in two segments, behaviour
    log-probs off the policy's (some TIS weights over the cap), durations spread out."""
    return [
        episode(
            1.0,
            [turn([3, 4, 5], [-1.9, -2.6, -1.2], obs=[6], dt=2.0), turn([7], [-3.0], dt=0.5)],
            prompt=(1, 2),
        ),
        episode(0.0, [turn([3], [-2.2], dt=1.0)], prompt=(1, 2)),
        episode(
            0.5,
            [
                turn([4, 1], [-1.5, -2.9], obs=[5], dt=4.0),
                turn([3, 3, 2], [-2.0, -2.1, -0.8], context=[6, 7], dt=0.2),
            ],
            prompt=(2,),
            group="h",
        ),
        episode(
            0.0, [turn([1, 2, 3, 4], [-2.3, -1.7, -2.0, -2.5], dt=3.0)], prompt=(7,), group="h"
        ),
    ]


def random_table(seed=0):
    return torch.randn(V, V, generator=torch.Generator().manual_seed(seed))


# -- advantages reach the tokens ------------------------------------------------------------------
@pytest.mark.parametrize("scale_by_std, a", [(True, 0.70710678), (False, 0.5)])
def test_grpo_advantage_reaches_each_episode_tokens(scale_by_std, a):
    # rewards 1, 0 -> A = +-0.7071 (std-scaled) or +-0.5; 2 tokens
    learner = make_learner(algo={"advantage": "grpo", "scale_by_std": scale_by_std})
    rl_step(
        learner, [episode(1.0, [turn([2])], prompt=(1,)), episode(0.0, [turn([4])], prompt=(3,))]
    )
    assert torch.allclose(grad(learner), uniform_grad((1, 2, a / 2), (3, 4, -a / 2)), atol=1e-6)


def test_rloo_advantage_reaches_each_episode_tokens():
    # rewards 1, 0, .5 -> A = 1 - .25 = .75, 0 - .75 = -.75, .5 - .5 = 0; 3 tokens
    learner = make_learner(algo={"advantage": "rloo"})
    rl_step(
        learner,
        [
            episode(1.0, [turn([2])], prompt=(1,)),
            episode(0.0, [turn([4])], prompt=(3,)),
            episode(0.5, [turn([6])], prompt=(5,)),
        ],
    )
    assert torch.allclose(
        grad(learner), uniform_grad((1, 2, 0.75 / 3), (3, 4, -0.75 / 3)), atol=1e-6
    )


def test_flow_grpo_advantage_counts_turns_not_episodes():
    # turn-samples 1, 1 (two turns) and 0; the failed turnless episode adds none:
    # mean 2/3, std .57735 -> A = .57735 on both turns of the winner, -1.15470 on the loser.
    # 3 tokens: 2 after context 1, 4 after observation 3, 6 after context 5.
    failed = episode(0.0, [], prompt=(7,))
    failed.failure = "environment crashed"
    learner = make_learner(algo={"advantage": "flow_grpo", "scale_by_std": True})
    rl_step(
        learner,
        [
            episode(1.0, [turn([2], obs=[3]), turn([4])], prompt=(1,)),
            episode(0.0, [turn([6])], prompt=(5,)),
            failed,
        ],
    )
    expected = uniform_grad((1, 2, 0.57735 / 3), (3, 4, 0.57735 / 3), (5, 6, -1.15470 / 3))
    assert torch.allclose(grad(learner), expected, atol=1e-5)


def two_tasks(rewards: dict[str, float]):
    """One episode per task, each sampling token 2 after its own context (1, 3, 5...)."""
    return [
        episode(r, [turn([2])], prompt=(2 * i + 1,), task=t, group=t)
        for i, (t, r) in enumerate(rewards.items())
    ]


def test_baseline_first_batch_falls_back_to_its_own_mean():
    # no history: b = batch mean .5 for both -> A = +.5 (task a), -.5 (task b); 2 tokens
    learner = make_learner(algo={"advantage": "baseline"})
    rl_step(learner, two_tasks({"a": 1.0, "b": 0.0}))
    assert torch.allclose(grad(learner), uniform_grad((1, 2, 0.25), (3, 2, -0.25)), atol=1e-6)


def test_baseline_uses_only_earlier_batches_then_records_this_one():
    # after batch 1, history a: [1], b: [0].  Batch 2: a earns 0 -> A = 0 - 1 = -1;
    # c is new -> b = mean of all history .5 -> A = 1 - .5 = +.5; 2 tokens
    learner = make_learner(algo={"advantage": "baseline"})
    baselines = TaskBaselines()  # the driver's (Session.baselines)
    rl_step(learner, two_tasks({"a": 1.0, "b": 0.0}), baselines)
    with torch.no_grad():
        learner.model.table.zero_()  # back to uniform, so the gradient reads the advantages
    rl_step(learner, two_tasks({"a": 0.0, "c": 1.0}), baselines)
    assert torch.allclose(grad(learner), uniform_grad((1, 2, -0.5), (3, 2, 0.25)), atol=1e-6)
    assert baselines.state_dict()["history"] == {"a": [1.0, 0.0], "b": [0.0], "c": [1.0]}


# -- off-policy corrections -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "off_policy, is_cap, c2, c3, c5",
    [
        # none: ratio vs behaviour. token 2: r = .5, A > 0, under the ceiling -> .5 * .5 / 3;
        #       token 3: r = 3 > 1.28 -> clipped, 0;  token 5: r = .5 < .8 with A < 0 -> clipped, 0
        ("none", 2.0, 0.25 / 3, 0.0, 0.0),
        # tis: ratio vs proximal = 1, times w = min(pi / mu, cap): .5, min(3, 2) = 2, .5
        ("tis", 2.0, 0.25 / 3, 1.0 / 3, -0.25 / 3),
        ("tis", 4.0, 0.25 / 3, 1.5 / 3, -0.25 / 3),
        # decoupled: ratio vs proximal = 1, w = .5, 3 > cap -> dropped, .5
        ("decoupled", 2.0, 0.25 / 3, 0.0, -0.25 / 3),
        ("decoupled", 4.0, 0.25 / 3, 1.5 / 3, -0.25 / 3),
    ],
)
def test_off_policy_correction(off_policy, is_cap, c2, c3, c5):
    # The policy gives every token 1/8. Behaviour probabilities: 1/4 (pi / mu = .5) for tokens
    # 2 and 5, 1/24 (pi / mu = 3) for token 3.  A = +.5 for 2 and 3, -.5 for 5; 3 tokens.
    half, three = U + math.log(2), U - math.log(3)
    learner = make_learner(algo={"off_policy": off_policy, "is_cap": is_cap})
    rl_step(
        learner,
        [
            episode(1.0, [turn([2, 3], [half, three])], prompt=(1,)),
            episode(0.0, [turn([5], [half])], prompt=(4,)),
        ],
    )
    assert torch.allclose(
        grad(learner), uniform_grad((1, 2, c2), (2, 3, c3), (4, 5, c5)), atol=1e-6
    )


# -- KL to the frozen base ------------------------------------------------------------------------
def kl_setup(kl_coef):
    """Base: uniform. Policy: row 1 has logit log 7 on token 2, so pi(2 | 1) = 7 / 14 = .5 and
    every other token 1/14. One episode (a lone group: A = 0) samples 2 after 1."""
    learner = make_learner(algo={"kl_coef": kl_coef})
    with torch.no_grad():
        learner.model.table[1, 2] = math.log(7)
    return learner, [episode(1.0, [turn([2], [math.log(0.5)])], prompt=(1,))]


def test_kl_metric_is_k3_of_the_policy_against_the_frozen_base():
    # k3 = exp(ref - logp) - (ref - logp) - 1 = (1/8)/(1/2) - log(1/4) - 1 = .25 + 1.386294 - 1
    learner, batch = kl_setup(0.1)
    stats = rl_step(learner, batch)
    assert stats["kl_ref"] == pytest.approx(0.636294, abs=1e-6)


def test_kl_gradient_pulls_toward_the_frozen_base():
    # d k3 / d logp = 1 - ref_p / p = 1 - .25 = .75; d logp / d row 1 = onehot(2) - pi(. | 1)
    # grad row 1 = .3 * .75 * (onehot(2) - pi): +.1125 on token 2, -.225 / 14 elsewhere,
    # so a descent step lowers pi(2 | 1) from .5 toward the base's 1/8.
    learner, batch = kl_setup(0.3)
    rl_step(learner, batch)
    pi = torch.full((V,), 1 / 14)
    pi[2] = 0.5
    expected = torch.zeros(V, V)
    expected[1] = 0.3 * 0.75 * (torch.nn.functional.one_hot(torch.tensor(2), V) - pi)
    assert torch.allclose(grad(learner), expected, atol=1e-6)
    assert learner.model.table[1, 2].item() < math.log(7)


# -- duration weights -----------------------------------------------------------------------------
def test_duration_weights_scale_each_turn_tokens():
    # dt: winner's turns 1 and 3, loser's .01 -> floor .05; mean 4.05 / 3 = 1.35
    #   -> w = .740741, 2.222 capped at 2, .037037.  A = +-.5; 3 tokens
    learner = make_learner(algo={"duration_weights": True, "duration_cap": 2.0})
    rl_step(
        learner,
        [
            episode(1.0, [turn([2], obs=[3], dt=1.0), turn([4], dt=3.0)]),
            episode(0.0, [turn([6], dt=0.01)], prompt=(5,)),
        ],
    )
    expected = uniform_grad(
        (1, 2, 0.5 * 0.740741 / 3), (3, 4, 0.5 * 2.0 / 3), (5, 6, -0.5 * 0.037037 / 3)
    )
    assert torch.allclose(grad(learner), expected, atol=1e-6)


def test_without_duration_weights_turns_weigh_the_same():
    learner = make_learner(algo={"duration_weights": False})
    rl_step(
        learner,
        [
            episode(1.0, [turn([2], obs=[3], dt=1.0), turn([4], dt=3.0)]),
            episode(0.0, [turn([6], dt=0.01)], prompt=(5,)),
        ],
    )
    expected = uniform_grad((1, 2, 0.5 / 3), (3, 4, 0.5 / 3), (5, 6, -0.5 / 3))
    assert torch.allclose(grad(learner), expected, atol=1e-6)


# -- overlong episodes and reward shaping ---------------------------------------------------------
@pytest.mark.parametrize(
    "mask_overlong, expected",
    [
        # masked: only the loser trains, A = -.5 over 1 token (the group mean still counts the
        # overlong winner); unmasked: +-.5 over 2 tokens
        (True, uniform_grad((3, 4, -0.5))),
        (False, uniform_grad((1, 2, 0.25), (3, 4, -0.25))),
    ],
)
def test_mask_overlong_keeps_overlong_episodes_out_of_the_loss(mask_overlong, expected):
    learner = make_learner(algo={"mask_overlong": mask_overlong})
    rl_step(
        learner, [episode(1.0, [turn([2])], overlong=True), episode(0.0, [turn([4])], prompt=(3,))]
    )
    assert torch.allclose(grad(learner), expected, atol=1e-6)


def test_a_batch_with_nothing_to_train_changes_nothing():
    learner = make_learner(train={"warmup_steps": 2})
    failed = episode(0.0, [], prompt=(5,))
    stats = rl_step(
        learner,
        [
            episode(1.0, [turn([2])], overlong=True),
            episode(0.0, [turn([4])], prompt=(3,), overlong=True),
            failed,
        ],
    )
    assert stats is None
    assert torch.equal(learner.model.table, torch.zeros(V, V))
    assert learner.step == 0
    assert learner.scheduler.get_last_lr() == [0.05]  # still warm-up step 0: .1 * 1/2
    assert learner.optimizer.state_dict()["state"] == {}


@pytest.mark.parametrize(
    "shaping",
    [
        # overlong: budget max_new_tokens 2 x max_turns 2 = 4, cache 2 -> 3 sampled tokens: -.5
        {
            "algo": {"overlong_cache": 2},
            "sampling": {"max_new_tokens": 2},
            "rollout": {"max_turns": 2},
        },
        # steps: budget 1 turn, .5 per extra turn -> 2 turns: -.5
        {"algo": {"step_budget": 1, "step_penalty": 0.5}},
    ],
    ids=["overlong_cache", "step_penalty"],
)
def test_reward_shaping_enters_the_advantages(shaping):
    # shaped rewards: winner 1 - .5 = .5 (3 tokens in 2 turns), loser 0 (1 token)
    #   -> A = +-.25 (not +-.5); 4 tokens
    learner = make_learner(**shaping)
    stats = rl_step(
        learner, [episode(1.0, [turn([2, 3]), turn([4])]), episode(0.0, [turn([6])], prompt=(5,))]
    )
    expected = uniform_grad((1, 2, 0.25 / 4), (2, 3, 0.25 / 4), (3, 4, 0.25 / 4), (5, 6, -0.25 / 4))
    assert torch.allclose(grad(learner), expected, atol=1e-6)
    assert stats["reward_shaped_mean"] == pytest.approx(0.25)


# -- aggregation and gradient accumulation --------------------------------------------------------
@pytest.mark.parametrize("micro_batch_size", [1, 2])
@pytest.mark.parametrize(
    "loss_agg, c_win, c_lose",
    [
        # winner: 3 tokens, A = +.5; loser: 1 token, A = -.5
        ("token_mean", 0.5 / 4, -0.5 / 4),  # every token / 4
        ("seq_mean", 0.5 / 3 / 2, -0.5 / 1 / 2),  # each row's token mean, / 2 rows
    ],
)
def test_loss_aggregation(loss_agg, c_win, c_lose, micro_batch_size):
    learner = make_learner(
        algo={"loss_agg": loss_agg}, train={"micro_batch_size": micro_batch_size}
    )
    rl_step(learner, [episode(1.0, [turn([2, 3, 4])]), episode(0.0, [turn([6])], prompt=(5,))])
    expected = uniform_grad((1, 2, c_win), (2, 3, c_win), (3, 4, c_win), (5, 6, c_lose))
    assert torch.allclose(grad(learner), expected, atol=1e-6)


def mixed_config(loss_agg, micro_batch_size, mini_batches=1, epochs=1):
    return {
        "algo": {
            "loss_agg": loss_agg,
            "kl_coef": 0.1,
            "duration_weights": True,
            "scale_by_std": True,
        },
        "train": {
            "micro_batch_size": micro_batch_size,
            "mini_batches": mini_batches,
            "epochs": epochs,
        },
    }


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_micro_batches_accumulate_the_full_batch_gradient(loss_agg):
    grads = {}
    for m in (1, 2, 5):  # 5 rows: one row per pass, uneven passes, everything at once
        learner = make_learner(random_table(), **mixed_config(loss_agg, m))
        rl_step(learner, mixed_batch())
        grads[m] = grad(learner).clone()
    assert grads[5].abs().max() > 0.01
    assert torch.allclose(grads[1], grads[5], atol=1e-6)
    assert torch.allclose(grads[2], grads[5], atol=1e-6)


class OneOfTwoRanks(Ranks):
    """Rank `rank` of two, without the collectives: each learner keeps its own gradient."""

    def __init__(self, rank):
        self.rank, self.world = rank, 2


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_two_ranks_gradients_add_up_to_the_one_process_gradient(loss_agg):
    """5 rows over 2 ranks (3 / 2, in micro-batches of 2): each rank normalises its share by the
    whole batch's tokens (or sequences), so the sum FSDP's reduce-scatter takes is the
    one-process gradient."""
    one = make_learner(random_table(), **mixed_config(loss_agg, 2))
    rl_step(one, mixed_batch())
    ranks = [
        Learner(BigramPolicy(random_table()), config(**mixed_config(loss_agg, 2)), OneOfTwoRanks(k))
        for k in (0, 1)
    ]
    for learner in ranks:
        rl_step(learner, mixed_batch())
    assert grad(one).abs().max() > 0.01
    assert torch.allclose(grad(ranks[0]) + grad(ranks[1]), grad(one), atol=1e-6)
    assert not torch.allclose(grad(ranks[0]), grad(one), atol=1e-3)


def test_split_ranks_cuts_contiguous_parts_and_leaves_late_ranks_empty():
    assert split_ranks([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]
    assert split_ranks([1], 3) == [[1], [], []]


def test_a_rank_with_fewer_micro_batches_pads_with_weightless_ones():
    """Every rank runs as many passes as the busiest (a sharded forward is a collective); the
    padding repeats another rank's row and is marked not live (no loss, no statistics)."""
    learner = Learner(BigramPolicy(), config(train={"micro_batch_size": 2}), OneOfTwoRanks(1))
    assert learner._micro_batches([["a", "b", "c"], ["d"]]) == [(["d"], True), (["a"], False)]
    learner.ranks.rank = 0
    assert learner._micro_batches([["a", "b", "c"], ["d"]]) == [(["a", "b"], True), (["c"], True)]


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_micro_batches_give_the_same_weights_after_several_updates(loss_agg):
    tables = {}
    for m in (1, 2, 5):
        learner = make_learner(
            random_table(), **mixed_config(loss_agg, m, mini_batches=2, epochs=2)
        )
        rl_step(learner, mixed_batch())
        tables[m] = learner.model.table.detach().clone()
    assert not torch.allclose(tables[5], random_table(), atol=1e-2)
    assert torch.allclose(tables[1], tables[5], atol=1e-5)
    assert torch.allclose(tables[2], tables[5], atol=1e-5)


# -- the model on another device ------------------------------------------------------------------
def test_the_fake_accelerator_refuses_a_cpu_tensor_as_cuda_does():
    with on_fake_device():
        there = torch.ones(2, 3, device=DEVICE)
        assert (there * torch.tensor(2.0)).sum().item() == 12.0  # a CPU scalar may mix
        with pytest.raises(RuntimeError, match="same device"):
            there + torch.ones(2, 3)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
@pytest.mark.parametrize("off_policy", ["none", "tis", "decoupled"])
def test_a_model_on_another_device_trains_as_on_the_cpu(off_policy, loss_agg):
    # KL on, 5 rows in micro-batches of 2, 2 mini-batches x 2 epochs (proximal log-probs):
    # every tensor the step combines with the model's log-probs must be on the model's device
    # (the fake accelerator raises on a CPU one, as CUDA does), and the result is the CPU's.
    sections = mixed_config(loss_agg, micro_batch_size=2, mini_batches=2, epochs=2)
    sections["algo"]["off_policy"] = off_policy
    cpu = make_learner(random_table(), **sections)
    with on_fake_device():
        fake = Learner(FakeDeviceBigram(random_table()), config(**sections))
        stats = rl_step(fake, mixed_batch())
    expected = rl_step(cpu, mixed_batch())
    assert fake.model.table.device == DEVICE
    for key in ("loss", "clip_frac", "approx_kl", "grad_norm", "entropy", "kl_ref", "logprob_gap"):
        assert stats[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
    assert torch.allclose(fake.model.table.inner, cpu.model.table.detach(), atol=1e-6)


# -- mini-batches, epochs and the proximal policy -------------------------------------------------
def four_updates(clip_high=0.28, clip_low=0.2):
    """Two winners sample 2 and two losers 3 after context 1; mini-batches [win, lose] twice,
    two epochs, lr .5. AdamW's first step moves table[1, 2] by +.5 and table[1, 3] by -.5
    (the rest of row 1 has zero gradient), so the second update sees
    pi(2 | 1) = e^.5 / (6 + e^.5 + e^-.5) = .19972 (ratio 1.598) and pi(3 | 1) = .07347
    (ratio .588) against the proximal 1/8."""
    learner = make_learner(
        algo={"clip_high": clip_high, "clip_low": clip_low},
        train={"mini_batches": 2, "epochs": 2, "lr": 0.5},
    )
    return learner, winner_and_loser() * 2


def test_first_update_has_ratio_one():
    learner, batch = four_updates()
    stats = rl_step(learner, batch)
    assert stats["updates"] == 4
    assert stats["approx_kl_per_update"][0] == pytest.approx(0.0, abs=1e-12)
    assert stats["clip_frac_per_update"][0] == 0.0


def test_clipping_binds_from_the_second_update():
    # update 2: winner ratio 1.598 > 1.28 and loser .588 < .8 -> both clipped
    learner, batch = four_updates()
    stats = rl_step(learner, batch)
    assert stats["clip_frac_per_update"][1] == 1.0
    assert stats["clip_frac"] > 0


def test_clip_high_changes_a_multi_update_step():
    # with clip_high 10 the winner's ratio 1.598 is inside the trust region at update 2
    tables = []
    for clip_high in (0.28, 10.0):
        learner, batch = four_updates(clip_high)
        rl_step(learner, batch)
        tables.append(learner.model.table.detach().clone())
    assert (tables[0] - tables[1]).abs().max() > 1e-3


def test_clip_low_alone_moves_the_floor_in_the_default_tis_path():
    # update 2: the loser's ratio .588 (A < 0) is under the floor .8 with clip_low .2 (clipped,
    # no gradient) and above the floor .5 with clip_low .5; the winner is clipped either way
    assert config().algo.off_policy == "tis"
    fracs, tables = [], []
    for clip_low in (0.2, 0.5):
        learner, batch = four_updates(clip_low=clip_low)
        fracs.append(rl_step(learner, batch)["clip_frac_per_update"][1])
        tables.append(learner.model.table.detach().clone())
    assert fracs == [1.0, 0.5]
    assert (tables[0] - tables[1]).abs().max() > 1e-3


def test_clip_high_does_not_matter_with_one_update():
    tables = []
    for clip_high in (0.28, 10.0):
        learner = make_learner(algo={"clip_high": clip_high}, train={"lr": 0.5})
        rl_step(learner, winner_and_loser() * 2)
        tables.append(learner.model.table.detach().clone())
    assert torch.equal(tables[0], tables[1])


def test_single_update_has_ratio_one_and_no_clipping():
    # behaviour log-probs far from the policy's: TIS reweights, but the ratio is 1
    learner = make_learner(random_table(), algo={"off_policy": "tis"})
    stats = rl_step(learner, mixed_batch())
    assert stats["updates"] == 1
    assert stats["clip_frac"] == 0.0
    assert stats["approx_kl"] == 0.0


@pytest.mark.parametrize(
    "mini_batches, epochs, proximal_passes",
    [
        (1, 1, 0),  # one update: its own detached log-probs are the proximal ones
        (2, 2, 3),  # 5 rows in micro-batches of 2: 3 no-grad passes, once, for 4 updates
        (5, 1, 3),
    ],
)
def test_proximal_logprobs_are_computed_once_per_step(mini_batches, epochs, proximal_passes):
    learner = make_learner(
        random_table(),
        train={"mini_batches": mini_batches, "epochs": epochs, "micro_batch_size": 2},
    )
    rl_step(learner, mixed_batch())
    assert learner.model.calls.count("nograd") == proximal_passes


def test_split_even_cuts_contiguous_chunks_differing_by_at_most_one():
    assert split_even([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]
    assert split_even([1, 2], 5) == [[1], [2]]


# -- temperature, entropy -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "temperature, p",
    [
        (1.0, 0.5),  # logits log 7 vs 0 -> 7 / 14
        (0.5, 0.875),  # logits / .5 -> 49 / 56
        (0.0, 0.5),  # greedy rollouts: log-probs at T = 1
    ],
)
def test_logprobs_are_taken_at_the_sampling_temperature(temperature, p):
    learner = make_learner(sampling={"temperature": temperature})
    with torch.no_grad():
        learner.model.table[1, 2] = math.log(7)
    stats = rl_step(learner, [episode(1.0, [turn([2], [math.log(p)])])])
    assert stats["logprob_gap"] == pytest.approx(0.0, abs=1e-6)


def test_entropy_metric_is_the_policy_entropy_at_the_sampled_tokens():
    # after context 1: pi = .5 on token 2, 1/14 on the 7 others
    #   H = .5 log 2 + 7 (1/14) log 14 = .346574 + 1.319529 = 1.666102 (not -log pi(2) = .693)
    # after context 3: uniform, H = log 8 = 2.079442.  Token mean: 1.872772
    learner = make_learner()
    with torch.no_grad():
        learner.model.table[1, 2] = math.log(7)
    stats = rl_step(learner, [episode(1.0, [turn([2])]), episode(0.0, [turn([4])], prompt=(3,))])
    assert stats["entropy"] == pytest.approx(1.872772, abs=1e-5)


# -- learning rate --------------------------------------------------------------------------------
def test_logged_lr_is_the_warm_up_lr_used_by_the_update():
    # warm-up 4, lr .1 -> step 0 runs at .1 * 1/4 = .025. AdamW's first step moves each
    # element with a gradient by lr * g / |g|: table[1, 2] up, table[1, 3] down by .025.
    learner = make_learner(train={"warmup_steps": 4, "lr": 0.1})
    stats = rl_step(learner, winner_and_loser())
    assert stats["lr"] == pytest.approx(0.025)
    assert learner.model.table[1, 2].item() == pytest.approx(0.025, rel=1e-5)
    assert learner.model.table[1, 3].item() == pytest.approx(-0.025, rel=1e-5)


@pytest.mark.parametrize(
    "schedule, lrs",
    [
        # warm-up 2 of 6 steps: 1/2, 2/2, then over the 4 remaining steps, frac = 0, 1/4, 2/4, 3/4
        ("constant", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ("linear", [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]),
        ("cosine", [0.5, 1.0, 1.0, 0.853553, 0.5, 0.146447]),  # (1 + cos(pi frac)) / 2
    ],
)
def test_lr_schedule_per_step(schedule, lrs):
    learner = make_learner(train={"warmup_steps": 2, "steps": 6, "schedule": schedule, "lr": 1.0})
    logged = [rl_step(learner, winner_and_loser())["lr"] for _ in range(6)]
    assert logged == pytest.approx(lrs, abs=1e-6)


# -- multi-segment episodes -----------------------------------------------------------------------
def test_each_segment_trains_as_its_own_row():
    # winner: prompt 1, samples 2, observes 3 | restarts from context 4, samples 5.
    # loser: prompt 6, samples 7.  dt 1, 3 | 2 -> mean 2 -> w = .5, 1.5 | 1.  A = +-.5.
    # 3 rows, 3 tokens; token 5 follows its context 4, not the first segment's observation 3.
    learner = make_learner(algo={"duration_weights": True})
    stats = rl_step(
        learner,
        [
            episode(1.0, [turn([2], obs=[3], dt=1.0), turn([5], context=[4], dt=3.0)]),
            episode(0.0, [turn([7], dt=2.0)], prompt=(6,)),
        ],
    )
    expected = uniform_grad((1, 2, 0.5 * 0.5 / 3), (4, 5, 0.5 * 1.5 / 3), (6, 7, -0.5 / 3))
    assert torch.allclose(grad(learner), expected, atol=1e-6)
    assert (stats["train_rows"], stats["train_tokens"]) == (3, 3)


# -- checkpoints ----------------------------------------------------------------------------------
def resumable(table=None):
    return make_learner(
        table, algo={"advantage": "baseline"}, train={"warmup_steps": 3, "lr": 0.05}
    )


def test_load_resumes_weights_optimizer_schedule_and_step(tmp_path):
    # the resumed learner's second step equals the original's: same weights, AdamW moments,
    # lr (warm-up step 1: .05 * 2/3) and step count (the driver's baselines travel in `extra`)
    a, baselines = resumable(), TaskBaselines()
    rl_step(a, two_tasks({"a": 1.0, "b": 0.0}), baselines)
    ckpt = a.save(tmp_path, extra={"baselines": baselines.state_dict()})
    b, resumed = resumable(random_table()), TaskBaselines()
    resumed.load_state_dict(b.load(ckpt)["baselines"])
    assert b.step == 1
    second = two_tasks({"a": 0.0, "c": 1.0})
    stats_a, stats_b = rl_step(a, second, baselines), rl_step(b, second, resumed)
    assert stats_b["lr"] == stats_a["lr"] == pytest.approx(0.05 * 2 / 3)
    assert torch.equal(b.model.table, a.model.table)
    assert resumed.state_dict() == baselines.state_dict()


def test_load_restores_the_random_generators(tmp_path):
    learner = resumable()
    ckpt = learner.save(tmp_path, extra={})
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    learner.load(ckpt)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws


def fake_cuda(monkeypatch, devices: int, states: list[torch.Tensor]) -> list[tuple]:
    """CUDA with `devices` GPUs whose generators hold `states`; returns the restores made, as
    (state, index), and raises like CUDA on an index this machine lacks."""
    cuda, restored = torch.cuda, []

    def set_rng_state(state, device="cuda"):
        if not isinstance(device, int) or device >= devices:
            raise IndexError(f"no CUDA device {device}")
        restored.append((state, device))

    monkeypatch.setattr(cuda, "is_available", lambda: devices > 0)
    monkeypatch.setattr(cuda, "device_count", lambda: devices)
    monkeypatch.setattr(cuda, "get_rng_state_all", lambda: states)
    monkeypatch.setattr(cuda, "set_rng_state", set_rng_state)
    monkeypatch.setattr(cuda.random, "set_rng_state", set_rng_state)  # set_rng_state_all's
    return restored


def test_on_a_gpu_the_cuda_generators_are_saved_and_restored_too(monkeypatch):
    """Dropout on a GPU draws from CUDA's generators: a checkpoint's generator state taken where
    CUDA is available holds them (through a file, as each rank writes it), and restoring it
    there sets them back."""
    states = [torch.tensor([1, 2], dtype=torch.uint8)]
    restored = fake_cuda(monkeypatch, 1, states)
    restore_rng_state(through_a_file(rng_state()))
    assert len(restored) == 1 and torch.equal(restored[0][0], states[0])
    fake_cuda(monkeypatch, 0, [])  # taken on a CPU machine: none
    restore_rng_state(through_a_file(rng_state()))
    assert len(restored) == 1


@pytest.mark.parametrize("present, restored_on", [(2, [0, 1]), (4, [0, 1, 2]), (0, [])])
def test_cuda_generators_restore_on_the_devices_both_machines_have(
    monkeypatch, present, restored_on
):
    # taken with 3 GPUs; restored with 2, 4 or none (a CPU driver)
    states = [torch.tensor([k], dtype=torch.uint8) for k in range(3)]
    fake_cuda(monkeypatch, 3, states)
    saved = through_a_file(rng_state())
    restored = fake_cuda(monkeypatch, present, [])
    restore_rng_state(saved)
    assert [(int(s[0]), i) for s, i in restored] == [(i, i) for i in restored_on]


def through_a_file(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", weights_only=False)


MISSING = "fakegpu"
"""A storage location this machine has no device for (as `cuda` on a CPU-only one)."""
_tag_missing = False


def _tag(storage):
    return MISSING if _tag_missing else None


def _restore(storage, location):
    if location.startswith(MISSING):
        raise RuntimeError(
            f"Attempting to deserialize object on a {MISSING} device, which this machine lacks"
        )


torch.serialization.register_package(1, _tag, _restore)


@contextmanager
def saved_on_a_missing_device():
    """Within the block torch.save records every tensor as on the `MISSING` device, as a GPU
    learner's checkpoint records `cuda:0`."""
    global _tag_missing
    _tag_missing = True
    try:
        yield
    finally:
        _tag_missing = False


def test_a_checkpoint_from_a_device_this_machine_lacks_loads_onto_the_cpu(tmp_path):
    a = resumable()
    rl_step(a, two_tasks({"a": 1.0, "b": 0.0}))
    with saved_on_a_missing_device():
        ckpt = a.save(tmp_path, extra={"note": "x"})
    with pytest.raises(RuntimeError, match=MISSING):  # the tensors do claim the missing device
        torch.load(ckpt / "rng" / "rank_0.pt", weights_only=False)
    state = read_trainer_state(ckpt)
    assert state["step"] == 1 and state["extra"] == {"note": "x"}
    b = resumable(random_table())
    assert b.load(ckpt) == {"note": "x"}
    assert torch.equal(b.model.table, a.model.table)
    assert torch.equal(
        b.optimizer.state_dict()["state"][0]["exp_avg"],
        a.optimizer.state_dict()["state"][0]["exp_avg"],
    )


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_a_crash_while_re_saving_leaves_a_loadable_checkpoint(tmp_path, monkeypatch, crash_at):
    # A re-save at the same step renames: (1) old step dir aside, (2) new dir into place,
    # (3) the `latest` pointer (Path.replace). Crash at each.
    learner = resumable()
    learner.save(tmp_path, extra={"version": "old"})
    with torch.no_grad():
        learner.model.table.fill_(1.0)
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(src)
        if len(calls) == crash_at:
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="simulated crash"):
        learner.save(tmp_path, extra={"version": "new"})
    monkeypatch.setattr(os, "replace", real_replace)
    found = latest_checkpoint(tmp_path)
    assert found is not None
    assert resumable().load(found)["version"] in ("old", "new")


def test_crash_between_the_two_renames_falls_back_to_the_moved_aside_copy(tmp_path, monkeypatch):
    learner = resumable()
    learner.save(tmp_path, extra={"version": "old"})
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError):
        learner.save(tmp_path, extra={"version": "new"})
    monkeypatch.setattr(os, "replace", real_replace)
    assert not (tmp_path / "step_000000").exists()
    assert latest_checkpoint(tmp_path) == tmp_path / ".aside_step_000000"
    assert resumable().load(latest_checkpoint(tmp_path)) == {"version": "old"}
    learner.step = 1  # the resumed run saves its next step: the moved-aside copy goes
    learner.save(tmp_path, extra={})
    assert not list(tmp_path.glob(".aside_*"))


def test_a_crash_while_writing_the_shards_leaves_the_last_checkpoint(tmp_path, monkeypatch):
    learner = resumable()
    learner.save(tmp_path, extra={"version": "old"})
    learner.step = 1
    real_save = checkpoint.dcp.save

    def crash(*args, **kwargs):
        real_save(*args, **kwargs)
        raise OSError("simulated crash")

    monkeypatch.setattr(checkpoint.dcp, "save", crash)
    with pytest.raises(OSError, match="simulated crash"):
        learner.save(tmp_path, extra={"version": "new"})
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000000"
    assert resumable().load(latest_checkpoint(tmp_path)) == {"version": "old"}
    learner.save(tmp_path, extra={"version": "new"})  # the half-written temp dir is replaced
    assert resumable().load(latest_checkpoint(tmp_path)) == {"version": "new"}
    assert not list(tmp_path.glob(".tmp_*"))


def test_save_keeps_the_newest_checkpoints(tmp_path):
    learner = resumable()
    for step in range(3):
        learner.step = step
        learner.save(tmp_path, extra={}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000001", "step_000002"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000002"


def test_a_checkpoint_holds_trainer_state_shards_generators_and_policy(tmp_path):
    learner = resumable()
    rl_step(learner, two_tasks({"a": 1.0, "b": 0.0}))
    ckpt = learner.save(tmp_path, extra={"note": "x"})
    assert sorted(p.name for p in ckpt.iterdir()) == ["policy", "rng", "state", "trainer.pt"]
    assert sorted(p.name for p in (ckpt / "state").iterdir()) == [".metadata", "__0_0.distcp"]
    assert [p.name for p in (ckpt / "rng").iterdir()] == ["rank_0.pt"]
    assert not list(tmp_path.glob(".*"))  # no temp dir, probe or pointer left over
    shutil.rmtree(ckpt / "state")  # the driver reads the run state without the model state
    state = read_trainer_state(ckpt)
    assert (state["step"], state["extra"], state["world"]) == (1, {"note": "x"}, 1)


def test_saving_before_the_first_update_changes_no_update(tmp_path):
    """An optimizer that never stepped has no moments; the checkpoint must not create them
    (AdamW's bias correction would then count one step too many), and loading it clears those
    of a learner that did step."""
    batches = [two_tasks({"a": 1.0, "b": 0.0}), two_tasks({"a": 0.0, "c": 1.0})]
    saved, plain, stepped = resumable(), resumable(), resumable(random_table())
    ckpt = saved.save(tmp_path, extra={})
    assert not saved.optimizer.state and not read_trainer_state(ckpt)["moments"]
    rl_step(stepped, batches[1])
    stepped.load(ckpt)
    for batch in batches:
        for learner in (saved, plain, stepped):
            rl_step(learner, batch)
    assert torch.equal(saved.model.table, plain.model.table)
    assert torch.equal(stepped.model.table, plain.model.table)


COLOCATED = {"kind": "vllm", "enable_sleep_mode": True}
"""An engine sleeping beside the learner: its optimizer state is created when it starts."""


def test_eager_optimizer_state_changes_no_update(tmp_path):
    """With a colocated engine the AdamW state exists before the first step (step 0, zero
    moments); every update, step count and moment then equals the lazy optimizer's, over
    several steps of two updates each (bias correction counts from the same step), and a
    checkpoint saved before the first step resumes with the state in place."""
    batches = [mixed_batch(), two_tasks({"a": 1.0, "b": 0.0}), mixed_batch()]
    two_updates = {"train": {"mini_batches": 2}}
    lazy = make_learner(random_table(), **two_updates)
    eager = make_learner(random_table(), engine=COLOCATED, **two_updates)
    assert not lazy.optimizer.state
    (state,) = eager.optimizer.state.values()
    assert state["step"].item() == 0 and not state["exp_avg"].any()
    resumed = make_learner(random_table(3), engine=COLOCATED, **two_updates)
    resumed.load(eager.save(tmp_path, extra={}))
    assert resumed.optimizer.state and resumed.step == 0
    for batch in batches:
        for learner in (lazy, eager, resumed):
            rl_step(learner, batch)
    assert not torch.allclose(lazy.model.table, random_table(), atol=1e-2)
    for learner in (eager, resumed):
        assert torch.equal(learner.model.table, lazy.model.table)
        (a,), (b,) = learner.optimizer.state.values(), lazy.optimizer.state.values()
        assert a["step"].item() == b["step"].item() == 6
        assert torch.equal(a["exp_avg"], b["exp_avg"])
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])


def test_a_format_1_checkpoint_loads_in_one_process(tmp_path):
    """An earlier practicum's checkpoint (the whole optimizer state inside trainer.pt)."""
    a = resumable()
    rl_step(a, two_tasks({"a": 1.0, "b": 0.0}))
    ckpt = save_format_1(a, tmp_path, {"note": "x"})
    assert latest_checkpoint(tmp_path) == ckpt
    b = resumable(random_table())
    assert b.load(ckpt) == {"note": "x"} and b.step == 1
    second = two_tasks({"a": 0.0, "c": 1.0})
    rl_step(a, second)
    rl_step(b, second)
    assert torch.equal(b.model.table, a.model.table)


def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line(tmp_path):
    ckpt = resumable().save(tmp_path, extra={})
    torch.save({**read_trainer_state(ckpt), "format": 3}, ckpt / "trainer.pt")
    with pytest.raises(
        PracticumError,
        match=r"^checkpoint .* has format 3; this practicum "
        r"reads formats 1 and 2 [^\n]*$",
    ):
        resumable().load(ckpt)


def test_no_checkpoint_without_a_pointer(tmp_path):
    assert latest_checkpoint(tmp_path) is None


# -- grammar-constrained turns (the tiny HF model) ------------------------------------------------
TOOL = 'start: "call " NAME "(" ARG ")"\nNAME: "view" | "search" | "edit"\nARG: /[a-z_]{1,12}/'
FORCED = 'start: "The answer is 42."'


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    from practicum.engine.hf import PolicyConfig, load_hf_engine

    return load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32", lora=False))


def constrained_group(engine, grammar, rewards, temperature=1.0):
    """One group of episodes, one turn each, sampled by the tiny model under `grammar`."""
    from practicum.engine.base import SamplingParams

    trainable, sampler = engine
    prompt = trainable.tokenizer("Which tool reads a file?").input_ids
    out = sampler.generate(
        [prompt] * len(rewards),
        SamplingParams(temperature=temperature, max_new_tokens=30, grammar=grammar),
        seeds=list(range(len(rewards))),
    )
    return [
        Episode("t", "g", prompt, [Turn(s.token_ids, s.logprobs, 0, grammar=grammar)], reward=r)
        for s, r in zip(out, rewards)
    ]


def hf_learner(engine, **sections) -> Learner:
    tree = {
        "train": {"mini_batches": 2, "warmup_steps": 0, "lr": 1e-2},
        "algo": {"kl_coef": 0.1},
        **sections,
    }
    return Learner(engine[0], Config.model_validate(tree))


def test_policy_proximal_and_reference_logprobs_replay_the_grammar(hf_engine, monkeypatch):
    eps = constrained_group(hf_engine, TOOL, [1.0, 0.0, 1.0, 0.0])
    learner = hf_learner(hf_engine)
    calls = []
    original = learner.model.token_logprobs

    def recording(*args, allowed=None, **kw):
        kind = (
            "base"
            if learner.model._reference_active
            else "grad"
            if torch.is_grad_enabled()
            else "proximal"
        )
        calls.append((kind, allowed is not None))
        return original(*args, allowed=allowed, **kw)

    monkeypatch.setattr(learner.model, "token_logprobs", recording)
    stats = rl_step(learner, eps)
    assert {k for k, _ in calls} == {"grad", "proximal", "base"} and all(a for _, a in calls)
    # the learner scores exactly what the sampler sampled from: the masked distribution
    assert stats["logprob_gap_max"] < 1e-4 and stats["kl_ref"] >= 0


def test_without_the_replayed_mask_the_learner_would_be_far_off(hf_engine):
    eps = constrained_group(hf_engine, TOOL, [1.0, 0.0])
    for e in eps:
        e.turns[0].grammar = None  # pretend the turns were free: scored under the full softmax
    assert rl_step(hf_learner(hf_engine), eps)["logprob_gap"] > 1.0


def test_a_turn_whose_tokens_are_all_forced_contributes_nothing(hf_engine):
    eps = constrained_group(hf_engine, FORCED, [1.0, 0.0])
    assert all(lp == 0.0 for e in eps for lp in e.turns[0].logprobs)  # every token forced
    learner = hf_learner(hf_engine, train={"mini_batches": 1, "warmup_steps": 0, "lr": 1e-2})
    before = [p.detach().clone() for p in learner.params]
    stats = rl_step(learner, eps)
    assert stats["grad_norm"] == 0.0 and stats["entropy"] == 0.0 and stats["logprob_gap"] == 0.0
    assert all(torch.equal(a, p) for a, p in zip(before, learner.params))
    # the same ids sampled freely would move the weights
    for e in eps:
        e.turns[0].grammar = None
    assert rl_step(learner, eps)["grad_norm"] > 0
