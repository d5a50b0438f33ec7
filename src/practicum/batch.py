"""From episodes to the learner's rows: rewards -> advantages -> per-token weights (the driver).

    batch = rl_batch(episodes, cfg, baselines)    # a `TrainBatch` for `Learner.train_step`

An episode gives one row per segment (`Episode.segments`); advantages and weights are per turn
and reach tokens through each position's turn index. This module only composes the pure
functions in `practicum.algo`; it holds no formula. The learner's ranks receive the rows and
only compute (`practicum.learner.rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from practicum.algo.advantages import flow_grpo_advantages, group_advantages, rloo_advantages
from practicum.algo.baselines import TaskBaselines
from practicum.algo.shaping import overlong_penalty, step_penalty
from practicum.algo.weights import broadcast_turn_weights, duration_weights
from practicum.config import AlgoConfig, Config
from practicum.episode import Episode, Segment
from practicum.learner.rows import TrainBatch, TrainRow


def shaped_rewards(episodes: list[Episode], algo: AlgoConfig, response_budget: int) -> Tensor:
    """Final rewards plus the DAPO soft overlong penalty on each episode's sampled tokens
    (against `response_budget` = max_new_tokens * max_turns) and the step penalty, when on."""
    r = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    if algo.overlong_cache > 0:
        lengths = torch.tensor([e.num_sampled for e in episodes])
        r = r + overlong_penalty(
            lengths, response_budget, min(algo.overlong_cache, response_budget)
        )
    if algo.step_budget > 0 and algo.step_penalty > 0:
        steps = torch.tensor([len(e.turns) for e in episodes])
        r = r + step_penalty(steps, algo.step_budget, algo.step_penalty)
    return r


def group_index(episodes: list[Episode]) -> Tensor:
    ids: dict[str, int] = {}
    return torch.tensor([ids.setdefault(e.group_id, len(ids)) for e in episodes], dtype=torch.long)


def turn_advantages(
    episodes: list[Episode],
    rewards: Tensor,
    algo: AlgoConfig,
    baselines: TaskBaselines | None = None,
) -> list[Tensor]:
    """Advantage of every turn, per episode ([len(turns)] each). GRPO, RLOO and the running
    baseline give the episode's advantage to all its turns; Flow-GRPO makes every turn a sample
    and normalises over all turn-samples of the group (arXiv 2510.05592)."""
    n_turns = torch.tensor([len(e.turns) for e in episodes], dtype=torch.long)
    if algo.advantage == "flow_grpo":
        flat = flow_grpo_advantages(
            rewards, n_turns, group_index(episodes), scale_by_std=algo.scale_by_std
        )
        return list(torch.split(flat, n_turns.tolist()))
    if algo.advantage == "baseline":
        if baselines is None:
            raise ValueError("advantage=baseline needs the learner's TaskBaselines")
        adv = baselines.advantages([e.task_id for e in episodes], rewards)
    elif algo.advantage == "rloo":
        adv = rloo_advantages(rewards, group_index(episodes))
    else:
        adv = group_advantages(rewards, group_index(episodes), scale_by_std=algo.scale_by_std)
    return [adv[i].expand(int(n)) for i, n in enumerate(n_turns)]


def turn_duration_weights(
    episodes: list[Episode], algo: AlgoConfig, include: list[bool] | None = None
) -> list[Tensor]:
    """dt_k / mean_batch(dt) per action (arXiv 2509.01684) when on; ones when off. The batch
    mean is over the turns that are trained (`include`), so masked episodes do not shift it."""
    n_turns = [len(e.turns) for e in episodes]
    include = include if include is not None else [True] * len(episodes)
    out = [torch.ones(n) for n in n_turns]
    kept = [i for i, e in enumerate(episodes) if include[i] and e.turns]
    if not algo.duration_weights or not kept:
        return out
    dts = torch.tensor([t.env_duration for i in kept for t in episodes[i].turns])
    w = duration_weights(dts, floor=algo.duration_floor, cap=algo.duration_cap)
    for i, wi in zip(kept, torch.split(w, [n_turns[i] for i in kept])):
        out[i] = wi
    return out


def trainable(episodes: list[Episode], algo: AlgoConfig) -> list[bool]:
    """Whether each episode enters the loss: it sampled something, and is not an overlong
    episode under `mask_overlong` (DAPO overlong filtering)."""
    return [e.num_sampled > 0 and not (algo.mask_overlong and e.overlong) for e in episodes]


@dataclass
class Row:
    """One training row: a segment of episode `episode` (an index into the batch)."""

    episode: int
    segment: Segment

    @property
    def tokens(self) -> int:
        return sum(self.segment.loss_mask)


def training_rows(episodes: list[Episode], include: list[bool]) -> list[Row]:
    return [Row(i, seg) for i, e in enumerate(episodes) if include[i] for seg in e.segments()]


def train_row(row: Row, turn_adv: Tensor, turn_w: Tensor) -> TrainRow:
    """The learner's row for a segment: its turns' advantages and weights on their sampled
    tokens (0 elsewhere)."""
    seg = row.segment
    turn = torch.tensor(seg.turn_index, dtype=torch.long)
    return TrainRow(
        list(seg.input_ids),
        [float(m) for m in seg.loss_mask],
        broadcast_turn_weights(turn_adv.float(), turn).tolist(),
        broadcast_turn_weights(turn_w.float(), turn).tolist(),
        [float(x) for x in seg.behaviour_logprobs],
        list(seg.constrained),
    )


def train_rows(rows: list[Row], turn_adv: list[Tensor], turn_w: list[Tensor]) -> list[TrainRow]:
    """`train_row` of each row, with its episode's per-turn advantages and weights."""
    return [train_row(r, turn_adv[r.episode], turn_w[r.episode]) for r in rows]


def rl_batch(
    episodes: list[Episode], cfg: Config, baselines: TaskBaselines
) -> tuple[TrainBatch, dict[str, float]] | None:
    """One RL step's `TrainBatch` (the PPO family on advantages, `train.mini_batches` x
    `train.epochs` updates) and the driver's metrics of it; None when no row has a token to
    train on (every episode masked), and then the running baselines are left as they were."""
    algo = cfg.algo
    rewards = shaped_rewards(episodes, algo, cfg.sampling.max_new_tokens * cfg.rollout.max_turns)
    adv = turn_advantages(episodes, rewards, algo, baselines)
    include = trainable(episodes, algo)
    wts = turn_duration_weights(episodes, algo, include)
    rows = [r for r in training_rows(episodes, include) if r.tokens]
    if not rows:
        return None
    if algo.advantage == "baseline":
        baselines.update([e.task_id for e in episodes], rewards.tolist())
    batch = TrainBatch(
        train_rows(rows, adv, wts),
        "policy_gradient",
        mini_batches=cfg.train.mini_batches,
        epochs=cfg.train.epochs,
    )
    return batch, {"reward_shaped_mean": rewards.mean().item()}


def rl_batch_of(episodes: list[Episode], cfg: Config) -> TrainBatch | None:
    """`rl_batch` with fresh running baselines, for callers outside a session (benchmarks);
    None when no row has a token to train on."""
    built = rl_batch(episodes, cfg, TaskBaselines(cfg.algo.baseline_window))
    return None if built is None else built[0]
