"""finetune.py: SFT / RFT as learner steps with the cross-entropy objective; golden against the
loop `practicum rft` ran before it went through the learner (kept below as the reference)."""

import pytest
import torch

from practicum.algo.rft import rft_loss, rft_mask
from practicum.batch import training_rows
from practicum.config import load_config
from practicum.episode import Episode, Turn
from practicum.finetune import finetune, sft_batches, sft_rows, stage_config
from practicum.learner import Learner
from practicum.learner.rows import pad_rows
from tests.fake_device import DEVICE, on_fake_device
from tests.learner.test_step import BigramPolicy, FakeDeviceBigram, config, random_table


def kept():
    """Three episodes, one malformed turn, rows of unequal length."""
    return [
        Episode(
            "t",
            "g",
            [1, 2],
            [Turn([3, 4], [-1.0, -1.0], 0), Turn([5], [-1.0], 0, malformed=True)],
            reward=1.0,
        ),
        Episode("t", "g", [6], [Turn([7, 1, 2], [-1.0] * 3, 0)], reward=1.0),
        Episode("u", "h", [3, 3], [Turn([2], [-1.0], 0)], reward=1.0),
    ]


def sft_config(**sections):
    cfg = config(**sections)
    return stage_config(cfg, "rft", cfg.rft)


def test_malformed_turns_are_not_imitated():
    bad = Episode("t", "g", [1, 2, 3], [Turn([5, 6], [-1.0, -1.0], 0, malformed=True)], reward=1.0)
    assert sft_rows([bad]) == []  # nothing left to train on
    good = Episode("t", "g", [1, 2, 3], [Turn([5, 6], [-1.0, -1.0], 0)], reward=1.0)
    cfg = sft_config(rft={"epochs": 2})
    assert len(finetune(Learner(BigramPolicy(), cfg), [good, bad], cfg.rft, 0)) == 2
    row = sft_rows([kept()[0]])[0]
    assert row.input_ids == [1, 2, 3, 4, 5] and row.loss_mask == [0, 0, 1, 1, 0]


def test_batches_shuffle_every_epoch_with_the_run_seed():
    rows = sft_rows(kept())
    a, b = sft_batches(rows, 3, 2, seed=7), sft_batches(rows, 3, 2, seed=7)
    assert [len(x.rows) for x in a] == [2, 1] * 3
    assert all(x.objective == "cross_entropy" for x in a)
    assert [[id(r) for r in x.rows] for x in a] == [[id(r) for r in x.rows] for x in b]
    assert sft_batches([], 3, 2, seed=7) == []


def test_stage_config_sets_the_sft_optimizer():
    cfg = stage_config(
        load_config(None, ["rft.lr=2e-5", "train.lr=1e-3"]),
        "rft",
        load_config(None, ["rft.lr=2e-5"]).rft,
    )
    t = cfg.train
    assert (t.lr, t.betas, t.weight_decay, t.warmup_steps, t.schedule) == (
        2e-5,
        (0.9, 0.999),
        0.01,
        0,
        "constant",
    )
    assert cfg.run.name == "rft" and cfg.run.resume


def test_sft_on_a_model_on_another_device_trains_as_on_the_cpu():
    # micro-batches of 2 over 3 rows, one malformed turn masked: the fake accelerator
    # (tests/fake_device.py) raises on any CPU tensor meeting the model's log-probs
    cfg = sft_config(rft={"epochs": 2, "batch_size": 3, "lr": 0.1}, train={"micro_batch_size": 2})
    cpu = Learner(BigramPolicy(random_table()), cfg)
    expected = finetune(cpu, kept(), cfg.rft, 0)
    with on_fake_device():
        fake = Learner(FakeDeviceBigram(random_table()), cfg)
        losses = finetune(fake, kept(), cfg.rft, 0)
    assert fake.model.table.device == DEVICE
    assert losses == pytest.approx(expected, rel=1e-6)
    assert torch.allclose(fake.model.table.inner, cpu.model.table.detach(), atol=1e-6)


# -- golden: the loop `practicum rft` / `practicum sft` ran before (commit 99d4b05) ----------------
def reference_finetune(model, kept, epochs, lr, batch_size, micro, grad_clip, seed):
    """rft.finetune and rft._sft_update as they were: their own AdamW (torch's defaults at
    lr), their own padding, token-mean cross-entropy over each update's rows."""
    import random

    rows = training_rows(kept, [True] * len(kept))
    masks = {
        id(row): rft_mask(
            row.segment.loss_mask,
            row.segment.turn_index,
            {k for k, t in enumerate(kept[row.episode].turns) if t.malformed},
        )
        for row in rows
    }
    rows = [row for row in rows if any(masks[id(row)])]
    params = [p for p in model.trainable_parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    losses = []
    for _ in range(epochs if rows else 0):
        order = rows[:]
        rng.shuffle(order)
        for i in range(0, len(order), batch_size):
            batch = order[i : i + batch_size]
            total = sum(sum(masks[id(row)]) for row in batch)
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for j in range(0, len(batch), micro):
                part = batch[j : j + micro]
                width = max(len(row.segment.input_ids) for row in part)
                ids = torch.full((len(part), width), model.pad_id, dtype=torch.long)
                attn = torch.zeros(len(part), width, dtype=torch.long)
                for b, row in enumerate(part):
                    ids[b, : len(row.segment.input_ids)] = torch.tensor(row.segment.input_ids)
                    attn[b, : len(row.segment.input_ids)] = 1
                mask = pad_rows(
                    [torch.tensor(masks[id(row)], dtype=torch.float32) for row in part], width
                )
                logp = model.token_logprobs(ids, attn, score_mask=mask)
                loss = rft_loss(logp, mask) * (sum(sum(masks[id(r)]) for r in part) / total)
                loss.backward()
                loss_sum += loss.item()
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            losses.append(loss_sum)
    return losses


def golden_episodes(seed=0):
    """Five two-turn episodes of random tokens; episode 3's first turn is malformed."""
    import random

    rng = random.Random(seed)

    def ids(n):
        return [rng.randrange(100, 5000) for _ in range(n)]

    def turn(n, **kw):
        return Turn(ids(n), [0.0] * n, 0, **kw)

    return [
        Episode(
            "t",
            f"g{k}",
            ids(4),
            [turn(rng.randrange(2, 7), observation_ids=ids(2), malformed=k == 3), turn(3)],
            reward=1.0,
        )
        for k in range(5)
    ]


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_one_learner_step_per_update_matches_the_old_sft_loop(tiny_model_dir, lora):
    """The same rows and hyperparameters through the old loop and through `finetune` (one
    cross-entropy `train_step` per update) give the same losses and weights."""
    from practicum.engine.factory import load_trainable
    from practicum.runtime.placement import policy_config

    base = load_config(
        None,
        [
            f"model.model={tiny_model_dir}",
            "model.dtype=float32",
            "model.device=cpu",
            f"model.lora={str(lora).lower()}",
            "rft.epochs=2",
            "rft.batch_size=3",
            "rft.lr=1e-3",
            "train.micro_batch_size=2",
            "train.grad_clip=0.5",
        ],
    )
    cfg = stage_config(base, "rft", base.rft)
    old = load_trainable(policy_config(cfg))
    want = reference_finetune(old, golden_episodes(), 2, 1e-3, 3, 2, 0.5, cfg.run.seed)
    learner = Learner(load_trainable(policy_config(cfg)), cfg)
    got = finetune(learner, golden_episodes(), cfg.rft, cfg.run.seed)
    assert len(got) == len(want) == 4  # 2 epochs x ceil(5 rows / 3)
    assert got == pytest.approx(want, rel=1e-5)
    new = dict(learner.model.model.named_parameters())
    start = dict(load_trainable(policy_config(cfg)).model.named_parameters())
    moved = 0.0
    for name, p in old.model.named_parameters():
        if p.requires_grad:
            assert torch.allclose(new[name], p, atol=1e-6), name
            moved = max(moved, (p - start[name]).abs().max().item())
    assert moved > 1e-4 and learner.step == 4
