"""Reproduce the duration bias of asynchronous policy gradient, and its fix (arXiv 2509.01684).

Set-up: a timed bandit (`practicum.envs.timed_bandit`; default a fast arm, reward 0.3, mean
0.1 s, and a slow arm, reward 1.0, mean 1 s, lognormal durations) and a tabular softmax policy
pi = softmax(z). `actors` threads run arms concurrently (the env really sleeps for the drawn
duration); the learner consumes finished runs in completion order and takes one SGD step on z
per `batch` runs with the real `practicum.algo` pieces: advantages, `duration_weights`, and the
async learner's truncated-IS objective (`ppo_clip_loss` around the current policy times
`truncated_importance_weights`), reduced by `aggregate_loss`.

When is there a bias? The paper argues that in wall time T an action x is sampled
n_x ~ pi(x) T / dt_x times. That holds when actor *time* is shared out in proportion to pi, and
this experiment makes the allocation explicit (`allocation`):

* `time_slice`: an actor picks an arm from pi, then keeps re-running it ("improve the previous
  solution", as in the paper's self-improvement loop) until a wall-clock slice of
  `slice_seconds` is spent; every run is a training sample. Time share ~ pi, so runs ~ pi / dt.
* `per_action`: an actor samples a fresh arm from pi after every run (a free-running pool, which
  is what `practicum.runtime.async_` does). By the renewal argument each run is a draw from pi
  and every run finishes, so completions ~ pi: no duration bias, only a lag (slow runs report
  older policies). Measured here and in benchmarks/duration_bias.py.

With completion share q (q ~ pi / dt for time_slice, q = pi for per_action), the expected update
per consumed run is g_k = sum_a q_a w_a A_a (1[a = k] - pi_k) (`expected_logit_update`), and the
estimator decides what the share does:

* `reinforce` (A = reward - fixed baseline, the estimator of the paper's argument): under
  time_slice without weights g_slow ~ pi_s pi_f (r_s / dt_s - r_f / dt_f): the policy drifts to the
  fast, weak arm whenever r_f / dt_f > r_s / dt_s (0.3 / 0.1 > 1.0 / 1.0 by default). With
  w = dt / mean_batch(dt), q w ~ pi and g_slow ~ pi_s pi_f (r_s - r_f): the slow, better arm wins.
  This is what tests/runtime/test_duration_bias.py checks with real threads and sleeps.
* `batch_grpo` (A = reward - mean of the consumed batch): the baseline is centred under q, so
  g_k = q_k (r_k - E_q r); with two arms the sign is right whatever q is, and only the speed
  changes. With a third, fast and bad arm, a fast mediocre arm can out-gain the slow best one
  for a long time (a transient drift).
* `groups` (complete GRPO groups of `group_size` runs, the async runtime's unit): a group is
  consumed only when all its runs are in, so completion order does not change its make-up.

Censoring is a different mechanism: dropping long actions (staleness_policy=drop with frequent
updates, aborting runs at weight updates, keeping the first B of M launched) also pushes toward
fast arms, but then dt-weighting is not the right correction (1 / P(kept | dt) would be).
"""

from __future__ import annotations

import math
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from practicum.algo.advantages import group_advantages
from practicum.algo.losses import aggregate_loss, ppo_clip_loss, truncated_importance_weights
from practicum.algo.weights import duration_weights
from practicum.envs.base import Task
from practicum.envs.timed_bandit import Arm, BanditSpec, TimedBanditEnv
from practicum.episode import Episode, Turn
from practicum.runtime.groups import GroupBoard
from practicum.suites import TaskCursor

Estimator = Literal["reinforce", "batch_grpo", "groups"]
Allocation = Literal["time_slice", "per_action"]


def expected_logit_update(pi: Tensor, rewards: Tensor, seconds: Tensor, estimator: Estimator,
                          weighted: bool, allocation: Allocation = "time_slice",
                          baseline: float = 0.0) -> Tensor:
    """Mean-field direction of one learner step on softmax logits (see module docstring).

        q_a = pi_a / dt_a / sum_b pi_b / dt_b     (time_slice: runs per unit of time share)
        q_a = pi_a                                (per_action)
        w_a = dt_a / E_q[dt]  if weighted else 1
        A_a = r_a - baseline (reinforce) | r_a - E_q[r] (batch_grpo) | r_a - E_pi[r] (groups)
        g_k = sum_a q_a w_a A_a (1[a = k] - pi_k)

    pi, rewards, seconds: [K].  Returns: [K] expected logit update per consumed action.
    """
    if allocation == "time_slice" and estimator != "groups":
        q = (pi / seconds) / (pi / seconds).sum()
    else:
        q = pi
    w = seconds / (q * seconds).sum() if weighted else torch.ones_like(seconds)
    if estimator == "reinforce":
        adv = rewards - baseline
    else:
        adv = rewards - (q * rewards).sum()
    coef = q * w * adv
    return coef - pi * coef.sum()


@dataclass
class BiasConfig:
    arms: tuple[Arm, ...] = (Arm("fast", 0.3, 0.1), Arm("slow", 1.0, 1.0))
    time_scale: float = 0.1
    """Multiplies the arms' mean durations (0.1: fast ~10 ms, slow ~100 ms)."""
    sigma: float = 1.0
    """Lognormal shape of the durations (heavy tail)."""
    estimator: Estimator = "reinforce"
    duration_weights: bool = True
    allocation: Allocation = "time_slice"
    slice_seconds: float = 2.0
    """time_slice: wall time an actor keeps re-running its arm (before time_scale)."""
    baseline: float = 0.0
    """Fixed baseline of the `reinforce` estimator."""
    actors: int = 8
    batch: int = 16
    """Actions per learner step (groups: batch // group_size complete groups)."""
    group_size: int = 4
    steps: int = 60
    lr: float = 2.0
    duration_floor: float = 0.001
    duration_cap: float = 10.0
    is_cap: float = 2.0
    seed: int = 0


@dataclass
class BiasResult:
    config: BiasConfig
    probs: list[list[float]] = field(default_factory=list)
    """pi after each step (row 0: before training), arms in config order."""
    seconds: list[float] = field(default_factory=list)
    """Wall time at each row of `probs`."""
    completions: dict[str, int] = field(default_factory=dict)
    """Actions consumed per arm."""
    staleness_mean: float = 0.0

    def final(self, arm: str) -> float:
        return self.probs[-1][[a.name for a in self.config.arms].index(arm)]


class _TabularPolicy:
    def __init__(self, k: int):
        self.logits = torch.zeros(k, requires_grad=True)
        self.version = 0
        self.lock = threading.Lock()

    def snapshot(self) -> tuple[list[float], int]:
        with self.lock:
            return torch.softmax(self.logits.detach(), 0).tolist(), self.version


def _run(env: TimedBanditEnv, arms: tuple[Arm, ...], k: int, probs: list[float], version: int,
         task_id: str = "bandit", gid: str = "batch") -> Episode:
    """Really run arm k: a one-turn episode whose sampled id is the arm index."""
    env.reset(Task(task_id))
    result = env.step(f"<choice>{arms[k].name}</choice>")
    turn = Turn([k], [math.log(probs[k])], version, env_duration=result.duration,
                reward=result.reward)
    return Episode(task_id, gid, [], [turn], reward=result.reward)


def _learn(policy: _TabularPolicy, batch: list[Episode], cfg: BiasConfig) -> None:
    """One SGD step on the logits with practicum.algo (the async learner's TIS objective)."""
    arms = torch.tensor([e.turns[0].sampled_ids[0] for e in batch])
    behaviour = torch.tensor([[e.turns[0].logprobs[0]] for e in batch])
    rewards = torch.tensor([e.reward for e in batch])
    dts = torch.tensor([e.turns[0].env_duration for e in batch])
    if cfg.estimator == "reinforce":
        adv = rewards - cfg.baseline
    else:
        groups = {g: i for i, g in enumerate(dict.fromkeys(e.group_id for e in batch))}
        ids = torch.tensor([groups[e.group_id] for e in batch])
        adv = group_advantages(rewards, ids, scale_by_std=False)
    w = (duration_weights(dts, cfg.duration_floor, cfg.duration_cap) if cfg.duration_weights
         else torch.ones_like(dts))
    logp = torch.log_softmax(policy.logits, 0)[arms][:, None]  # [B, 1]: one token per action
    prox = logp.detach()
    token_loss, _ = ppo_clip_loss(logp, prox, adv[:, None])
    token_loss = token_loss * truncated_importance_weights(prox, behaviour, cfg.is_cap)
    loss = aggregate_loss(token_loss * w[:, None], torch.ones_like(logp))
    loss.backward()
    with policy.lock, torch.no_grad():
        policy.logits -= cfg.lr * policy.logits.grad
        policy.logits.grad = None
        policy.version += 1


def run_bias_experiment(cfg: BiasConfig) -> BiasResult:
    """Train the tabular policy with concurrent actors for `cfg.steps` learner steps."""
    spec = BanditSpec(arms=cfg.arms, sigma=cfg.sigma, time_scale=cfg.time_scale, process=False)
    policy = _TabularPolicy(len(cfg.arms))
    stop = threading.Event()
    done: queue.Queue[Episode] = queue.Queue()
    board = None
    if cfg.estimator == "groups":
        if cfg.allocation != "per_action":
            raise ValueError("the groups estimator samples a fresh arm per run: use "
                             "allocation='per_action'")
        per_step = max(1, cfg.batch // cfg.group_size)
        board = GroupBoard(TaskCursor([Task("bandit")], cfg.seed), cfg.group_size,
                           max_open=2 * per_step)

    def actor(i: int) -> None:
        rng = random.Random(cfg.seed * 7919 + i)
        env = TimedBanditEnv(spec, seed=cfg.seed * 104_729 + i)
        pick = lambda probs: rng.choices(range(len(cfg.arms)), weights=probs)[0]  # noqa: E731
        while not stop.is_set():
            if board is not None:  # complete groups, a fresh arm per run
                a = board.next_assignment(stop)
                if a is None:
                    return
                probs, version = policy.snapshot()
                episode = _run(env, cfg.arms, pick(probs), probs, version, a.task.task_id,
                               a.group_id)
                board.finish(a, episode, -1)
                continue
            probs, version = policy.snapshot()
            k = pick(probs)
            done.put(_run(env, cfg.arms, k, probs, version))
            if cfg.allocation == "per_action":
                continue
            end = time.perf_counter() + cfg.slice_seconds * cfg.time_scale
            while time.perf_counter() < end and not stop.is_set():  # keep improving arm k
                probs, version = policy.snapshot()
                done.put(_run(env, cfg.arms, k, probs, version))

    result = BiasResult(cfg)
    threads = [threading.Thread(target=actor, args=(i,), daemon=True) for i in range(cfg.actors)]
    start = time.perf_counter()
    result.probs.append(policy.snapshot()[0])
    result.seconds.append(0.0)
    counts = [0] * len(cfg.arms)
    lag: list[int] = []
    for t in threads:
        t.start()
    try:
        for _ in range(cfg.steps):
            if board is None:
                batch = [done.get() for _ in range(cfg.batch)]
            else:
                batch = []
                while len(batch) < cfg.batch:
                    g = board.take(timeout=5.0)
                    batch += g.episodes if g is not None else []
            for e in batch:
                counts[e.turns[0].sampled_ids[0]] += 1
                lag.append(policy.version - e.turns[0].policy_version)
            _learn(policy, batch, cfg)
            result.probs.append(policy.snapshot()[0])
            result.seconds.append(time.perf_counter() - start)
    finally:
        stop.set()
        if board is not None:
            board.close()
        for t in threads:
            t.join(timeout=30)
    result.completions = {a.name: n for a, n in zip(cfg.arms, counts)}
    result.staleness_mean = sum(lag) / max(1, len(lag))
    return result
