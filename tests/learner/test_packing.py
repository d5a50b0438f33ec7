"""Packed micro-batches (train.max_tokens_per_micro_batch) against padded ones, on the tiny Llama:
the same log-probs, losses and gradients (1e-5, fp32) for each loss aggregation, with the KL term,
a grammar-constrained span, several mini-batches (proximal log-probs) and gradient checkpointing.

The padded runs take the shared-prompt pass (each group's 9-token prompt once,
`HFTrainable._hidden`); the packed ones run every row whole: that the two agree also checks the
shared-prompt pass."""

import random

import pytest
import torch

from practicum.config import load_config
from practicum.engine.factory import load_trainable
from practicum.learner import Learner
from practicum.learner.ranks import split_ranks
from practicum.learner.rows import TrainBatch, TrainRow, token_batch
from practicum.learner.step import row_length
from practicum.runtime.placement import policy_config
from tests.ranks import config as ranks_config
from tests.ranks import (
    episodes,
    one_process_learner,
    rl_step,
    sft_batch,
    spawn,
    train_and_report,
    trainable_weights,
)

ANSWER = 'start: "Answer: " /[0-9]{1,3}/ "."'


def rows(tokenizer, seed: int = 0) -> list[TrainRow]:
    """Two GRPO groups of 3 rows (a 9-token prompt each, replies of 2 to 30 tokens, advantages
    +-1, off-policy behaviour log-probs); one reply is sampled under a grammar."""
    rng = random.Random(seed)
    answer = tokenizer("Answer: 42.").input_ids + [tokenizer.eos_token_id]
    out = []
    for g in range(2):
        prompt = [rng.randrange(100, 5000) for _ in range(9)]
        for k in range(3):
            reply = (
                answer
                if (g, k) == (1, 1)
                else [rng.randrange(100, 5000) for _ in range(rng.randrange(2, 30))]
            )
            n, m = len(prompt), len(reply)
            out.append(
                TrainRow(
                    prompt + reply,
                    [0.0] * n + [1.0] * m,
                    advantages=[0.0] * n + [1.0 if k % 2 else -1.0] * m,
                    behaviour_logp=[0.0] * n + [-rng.uniform(0.5, 8.0) for _ in range(m)],
                    constrained=[(n, n + m, ANSWER)] if (g, k) == (1, 1) else [],
                )
            )
    return out


def config(model_dir, *extra: str):
    return load_config(
        None,
        [
            f"model.model={model_dir}",
            "model.dtype=float32",
            "model.device=cpu",
            "model.lora=false",
            "algo.kl_coef=0.1",
            "train.lr=1e-3",
            "train.warmup_steps=0",
            "train.grad_clip=1000",
            "train.micro_batch_size=2",
            *extra,
        ],
    )


def learner(model_dir, *extra: str) -> Learner:
    cfg = config(model_dir, *extra)
    return Learner(load_trainable(policy_config(cfg)), cfg)


def grads(learner: Learner) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in learner.params])


def weights(learner: Learner) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in learner.params])


@pytest.fixture(scope="module")
def padded_model(tiny_model_dir):
    """The tiny model, fully trainable, moved away from its frozen copy (the KL reference) so
    that the KL term has a value and a gradient."""
    model = learner(tiny_model_dir).model
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.trainable_parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def test_packed_logprobs_and_entropies_equal_padded_ones(padded_model):
    model = padded_model
    tb = token_batch(rows(model.tokenizer), model.pad_id, tokenizer=model.tokenizer)
    assert tb.allowed is not None and len(tb.allowed.positions) == 7  # the grammar's span
    with torch.no_grad():
        want = model.token_logprobs(
            tb.input_ids, tb.attention_mask, 0.8, True, score_mask=tb.loss_mask, allowed=tb.allowed
        )
        got = model.token_logprobs(
            tb.input_ids,
            tb.attention_mask,
            0.8,
            True,
            score_mask=tb.loss_mask,
            allowed=tb.allowed,
            packed=True,
        )
        free = model.token_logprobs(
            tb.input_ids, tb.attention_mask, 0.8, score_mask=tb.loss_mask, packed=True
        )
    for w, g in zip(want, got):
        assert w.abs().max() > 0.1
        assert torch.allclose(g, w, atol=1e-5)
    row = 4  # the constrained reply: its log-probs are the grammar's renormalised ones
    assert (got[0][row] - free[row]).abs().max() > 0.1


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_a_packed_step_has_the_padded_steps_loss_and_gradients(
    tiny_model_dir, padded_model, loss_agg
):
    """One update (KL on, a constrained row), micro-batches of 2 padded rows vs token budgets
    of 60 (packs of 1 to 3 rows): the same loss and gradient. (Not compared: the updated
    weights. AdamW moves a weight whose gradient is near its eps, 1e-8, by a sizeable share of
    lr, so rounding-level differences of such gradients show up as ~lr / 30 in the weights.)"""
    results = []
    for extra in ([], ["train.max_tokens_per_micro_batch=60"]):  # lr 0: one model serves both
        ln = Learner(
            padded_model,
            config(
                tiny_model_dir,
                f"algo.loss_agg={loss_agg}",
                "train.mini_batches=1",
                "train.lr=0",
                *extra,
            ),
        )
        stats = ln.train_step(TrainBatch(rows(ln.model.tokenizer)))
        results.append((stats, grads(ln)))
    (want, want_grad), (got, got_grad) = results
    assert want_grad.abs().max() > 1e-3 and want["kl_ref"] > 0
    assert torch.allclose(got_grad, want_grad, rtol=0, atol=1e-6)
    for key in ("loss", "entropy", "kl_ref", "logprob_gap", "grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


def test_packed_updates_with_proximal_logprobs_and_checkpointing_match_padded(tiny_model_dir):
    """Two mini-batches (proximal log-probs; the second update's ratio is not 1), LoRA,
    gradient checkpointing recomputing the packed layers in backward: the weights after both
    updates match the padded run's."""
    common = [
        "model.lora=true",
        "train.mini_batches=2",
        "train.epochs=1",
        "model.gradient_checkpointing=true",
    ]
    out = []
    for extra in ([], ["train.max_tokens_per_micro_batch=45"]):
        ln = learner(tiny_model_dir, *common, *extra)
        start = weights(ln).clone()
        stats = ln.train_step(TrainBatch(rows(ln.model.tokenizer, seed=1), mini_batches=2))
        out.append((stats, weights(ln)))
    (want, want_w), (got, got_w) = out
    assert want["updates"] == got["updates"] == 2
    assert (want_w - start).abs().max() > 1e-4
    assert torch.allclose(got_w, want_w, atol=1e-5)
    for key in ("loss", "clip_frac", "approx_kl", "kl_ref"):
        assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


def test_a_token_budget_fills_micro_batches_with_whole_rows(padded_model):
    """Budget 20: rows of 10 + 10 fill one micro-batch, a row of 35 goes alone, unsplit; on
    two ranks the token shares balance (35 | 10 + 10 + 5 + 5 + 5) and the lighter rank pads
    with a weightless pass."""
    cfg = config("unused", "train.max_tokens_per_micro_batch=20")
    ln = Learner(padded_model, cfg)
    batch = [TrainRow([1] * n, [1.0] * n) for n in (10, 10, 35, 5, 5, 5)]
    micros = ln._micro_batches([batch])
    assert [[len(r.input_ids) for r in m] for m, _ in micros] == [[10, 10], [35], [5, 5, 5]]
    shares = split_ranks(batch, 2, row_length)
    assert [[len(r.input_ids) for r in s] for s in shares] == [[10, 10], [35, 5, 5, 5]]
    assert [(len(m), live) for m, live in ln._micro_batches(shares)] == [(2, True), (1, False)]


@pytest.mark.slow
def test_two_ranks_packed_train_as_one_padded_process(tiny_model_dir, tmp_path):
    """FSDP2 over 2 gloo ranks with token budgets (packed micro-batches, shares split by tokens)
    against one process with padded micro-batches of 2 rows: an RL step (2 epochs x 2
    mini-batches, KL on) and an SFT step give the same metrics, and the weights agree within
    what AdamW makes of rounding (lr 3e-5 per update)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank has
    try:
        cfg = ranks_config(tiny_model_dir, True)
        spawn(
            2,
            train_and_report,
            ranks_config(tiny_model_dir, True, "train.max_tokens_per_micro_batch=24"),
            [1],
            tmp_path / "ranks.pt",
        )
        got = torch.load(tmp_path / "ranks.pt", weights_only=False)
        learner = one_process_learner(cfg)
        want = [rl_step(learner, episodes(1)), learner.train_step(sft_batch(9))]
        weights = trainable_weights(learner)
    finally:
        torch.set_num_threads(threads)
    assert got["step"] == learner.step == 2
    assert max((got["weights"][k] - weights[k]).abs().max().item() for k in weights) < 1e-5
    for mine, theirs in zip(got["metrics"], want):
        for key in ("loss", "entropy", "grad_norm", "train_tokens", "kl_ref", "logprob_gap"):
            if key in theirs:
                assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key


def test_ranks_get_contiguous_shares_of_about_equal_tokens():
    def split(lengths, world):
        rows = [TrainRow([1] * n, [1.0] * n) for n in lengths]
        return [[len(r.input_ids) for r in s] for s in split_ranks(rows, world, row_length)]

    assert split([10, 1, 1, 1, 1], 2) == [[10], [1, 1, 1, 1]]  # by rows: 10 + 1 + 1 | 1 + 1
    assert split([5, 5, 5, 1], 4) == [[5], [5], [5], [1]]  # every rank a row
    assert split([3, 3, 3], 2) == [[3, 3], [3]]
    assert split([7], 3) == [[7], [], []]
