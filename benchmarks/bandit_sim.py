"""The duration bias of asynchronous policy gradient (arXiv 2509.01684) on a timed bandit: a
mean-field model and a simulation with real threads and real sleeps of both batching modes.

Set-up: a tabular softmax policy pi = softmax(z) over the arms of a timed bandit (each arm
really sleeps for a lognormal duration around its mean, `practicum.envs.timed_bandit`).
`actors` threads take episode slots of groups (a group = one task drawn `group_size` times;
oldest open group first; admission opens a new group only while fewer than
(max_staleness + 1) x tasks_per_step groups are open), as the async runtime's actors do. The
learner takes one SGD step on z per batch with the real `practicum.algo` pieces: advantages,
`duration_weights`, the async learner's truncated-IS objective (`ppo_clip_loss` around the
current policy times `truncated_importance_weights` against the log-prob recorded when the arm
was sampled), reduced by `aggregate_loss`. Batching (`batching`):

* `groups`: the learner takes `tasks_per_step` *complete* groups in completion order; GRPO
  advantages within each group (`group_advantages`, scale_by_std as the runtime default).
* `streaming`: the learner takes the first N = group_size x tasks_per_step episodes to finish,
  whatever their group; A = R - b(task) with `TaskBaselines` (running mean of earlier batches'
  rewards), updated after each batch. An episode still running goes into a later batch.

Allocation of actor time (`allocation`) decides whether there is a bias at all:

* `per_action`: an actor samples a fresh arm from pi for every episode (the runtime). By the
  renewal argument each run is a draw from pi and every run finishes and is consumed, so the
  consumed share is q = pi: no duration bias, only a lag (slow runs report older policies).
* `time_slice`: an actor picks an arm from pi, then keeps re-running it for `slice_seconds` of
  wall time (the paper's self-improving actors). Time share ~ pi, so runs ~ pi / dt: the
  paper's premise holds, q_a ~ pi_a / dt_a. In `groups` the same share fills the groups.

Mean field (`expected_logit_update`): with consumed share q and weight w_a = dt_a / E_q[dt],
the expected step per consumed run is g_k = sum_a q_a w_a E[A | a] (1[a = k] - pi_k). Then:

* time_slice + weights: q w = pi, and any baseline constant in the batch cancels, so g equals
  the unbiased per_action update: the paper's fix is exact where its premise holds.
* time_slice, no weights: with a *centred* advantage (streaming baseline ~ E_q[r], GRPO
  groups) g_k = q_k (r_k - E_q r): the best arm's logit still rises, the worst still falls; q
  only changes speeds, so a fast mediocre arm can lead for a while (3 arms) but is not a fixed
  point. The drift to a fast, weak arm the paper describes needs an advantage not centred under
  q (`advantage="reward"`, A = R: g_slow ~ pi_s pi_f (r_s / dt_s - r_f / dt_f) < 0 for the
  paper's arms).
* per_action + weights: q w ~ pi dt, an over-correction toward slow arms; when a fast arm is
  best it holds the policy on a slow, worse arm for a long time.

The mean field ignores noise, staleness, the baseline's lag and the start-up transient (the
first batches are the fastest runs, q ~ pi / dt, even per_action), and takes a group's members
as independent draws (under time_slice one actor fills consecutive slots with the same arm).
Not simulated: dynamic sampling, staleness_policy=drop, several task ids (the streaming
baseline here is one task's window), multi-turn episodes.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import product
from typing import Literal

import torch
from torch import Tensor

from practicum.algo.advantages import group_advantages
from practicum.algo.baselines import TaskBaselines
from practicum.algo.losses import aggregate_loss, ppo_clip_loss, truncated_importance_weights
from practicum.algo.weights import duration_weights
from practicum.envs.timed_bandit import Arm, draw_duration, run_for

Batching = Literal["groups", "streaming"]
Allocation = Literal["per_action", "time_slice"]
Estimator = Literal["reinforce", "streaming", "groups"]

PAPER_ARMS = (Arm("fast", 0.3, 0.1), Arm("slow", 1.0, 1.0))
FAST_BEST_ARMS = (Arm("fast_good", 1.0, 0.1), Arm("slow_ok", 0.8, 1.0), Arm("fast_bad", 0.0, 0.1))
TASK = "bandit"


def consumed_share(pi: Tensor, seconds: Tensor, allocation: Allocation) -> Tensor:
    """q_a = pi_a (per_action);  q_a = (pi_a / dt_a) / sum_b pi_b / dt_b (time_slice)."""
    return pi if allocation == "per_action" else (pi / seconds) / (pi / seconds).sum()


def group_mean_advantage(q: Tensor, rewards: Tensor, group_size: int, scale_by_std: bool) -> Tensor:
    """E[A 1[a]] per consumed run for GRPO groups of `group_size` independent draws from q:
    exact, over every composition of a group.  Returns: [K]."""
    k = len(q)
    out = torch.zeros(k, dtype=torch.float64)
    for arms in product(range(k), repeat=group_size):
        p = math.prod(float(q[a]) for a in arms)
        ids = torch.tensor(arms)
        adv = group_advantages(rewards.double()[ids], torch.zeros_like(ids), scale_by_std)
        out.index_add_(0, ids, p * adv / group_size)
    return out.to(q.dtype)


def expected_logit_update(
    pi: Tensor,
    rewards: Tensor,
    seconds: Tensor,
    estimator: Estimator,
    weighted: bool,
    allocation: Allocation = "time_slice",
    baseline: float = 0.0,
    group_size: int = 4,
    scale_by_std: bool = False,
) -> Tensor:
    """Mean-field direction of one learner step on softmax logits (module docstring).

        q_a = consumed share (`consumed_share`)
        w_a = dt_a / E_q[dt]  if weighted else 1
        E[A 1[a]] = q_a (r_a - baseline)            reinforce (A = R - fixed baseline)
                  = q_a (r_a - E_q r)               streaming (baseline ~ mean consumed reward)
                  = `group_mean_advantage`          groups (GRPO over group_size draws from q)
        g_k = sum_a w_a E[A 1[a]] (1[a = k] - pi_k)

    pi, rewards, seconds: [K].  Returns: [K] expected logit update per consumed run.
    """
    q = consumed_share(pi, seconds, allocation)
    w = seconds / (q * seconds).sum() if weighted else torch.ones_like(seconds)
    if estimator == "reinforce":
        adv = q * (rewards - baseline)
    elif estimator == "streaming":
        adv = q * (rewards - (q * rewards).sum())
    else:
        adv = group_mean_advantage(q, rewards, group_size, scale_by_std)
    coef = w * adv
    return coef - pi * coef.sum()


@dataclass
class BiasConfig:
    arms: tuple[Arm, ...] = PAPER_ARMS
    batching: Batching = "groups"
    allocation: Allocation = "per_action"
    duration_weights: bool = False
    advantage: Literal["runtime", "reward"] = "runtime"
    """runtime: GRPO (groups) or TaskBaselines (streaming); reward: A = R, streaming only (the
    estimator of the paper's argument, a reference)."""
    time_scale: float = 0.05
    """Multiplies the arms' mean durations (0.05: fast ~5 ms, slow ~50 ms)."""
    sigma: float = 1.0
    slice_seconds: float = 2.0
    """time_slice: wall time an actor keeps re-running its arm (before time_scale)."""
    actors: int = 8
    group_size: int = 4
    tasks_per_step: int = 4
    max_staleness: int = 2
    scale_by_std: bool = True
    baseline_window: int = 32
    steps: int = 60
    lr: float = 1.0
    duration_floor: float = 0.05
    """Seconds before time_scale (the runtime default, scaled like the arms)."""
    duration_cap: float = 10.0
    is_cap: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.advantage == "reward" and self.batching != "streaming":
            raise ValueError(
                "advantage='reward' is a streaming reference: use batching='streaming'"
            )

    @property
    def best(self) -> int:
        return max(range(len(self.arms)), key=lambda i: self.arms[i].reward)

    def estimator(self) -> Estimator:
        return "reinforce" if self.advantage == "reward" else self.batching


def mean_field_curve(cfg: BiasConfig) -> list[float]:
    """P(best arm) after each step of z += lr g(softmax(z)) from z = 0 (no noise, no lag)."""
    rewards = torch.tensor([a.reward for a in cfg.arms], dtype=torch.float64)
    seconds = torch.tensor([a.seconds for a in cfg.arms], dtype=torch.float64)
    z = torch.zeros(len(cfg.arms), dtype=torch.float64)
    curve = [float(torch.softmax(z, 0)[cfg.best])]
    for _ in range(cfg.steps):
        pi = torch.softmax(z, 0)
        z = z + cfg.lr * expected_logit_update(
            pi,
            rewards,
            seconds,
            cfg.estimator(),
            cfg.duration_weights,
            cfg.allocation,
            group_size=cfg.group_size,
            scale_by_std=cfg.scale_by_std,
        )
        curve.append(float(torch.softmax(z, 0)[cfg.best]))
    return curve


@dataclass
class Run:
    """One finished episode: a single arm pull."""

    group: int
    arm: int
    logprob: float
    """log pi(arm) under the policy that sampled it (the behaviour policy)."""
    version: int
    seconds: float
    reward: float


@dataclass
class BiasResult:
    config: BiasConfig
    probs: list[list[float]] = field(default_factory=list)
    """pi after each step (row 0: before training), arms in config order."""
    completions: dict[str, int] = field(default_factory=dict)
    """Runs consumed per arm."""
    staleness_mean: float = 0.0
    """Mean over consumed runs of (learner version - behaviour version)."""
    wall_seconds: float = 0.0

    def best_curve(self) -> list[float]:
        return [row[self.config.best] for row in self.probs]


class _Policy:
    def __init__(self, k: int):
        self.logits = torch.zeros(k, requires_grad=True)
        self.version = 0
        self.lock = threading.Lock()

    def snapshot(self) -> tuple[list[float], int]:
        with self.lock:
            return torch.softmax(self.logits.detach(), 0).tolist(), self.version


class _Group:
    def __init__(self):
        self.assigned, self.consumed = 0, 0
        self.finished: list[Run] = []


class SlotBoard:
    """Episode slots of groups for actors; finished runs to the learner by `batching`.

    A group stays open until the learner has taken all its runs; admission opens a new group only
    while fewer than `max_open` are open, as the runtime's GroupBoard."""

    def __init__(self, batching: Batching, group_size: int, max_open: int):
        self.batching, self.group_size, self.max_open = batching, group_size, max_open
        self.cond = threading.Condition()
        self.open: dict[int, _Group] = {}
        self.ready: deque[Run | list[Run]] = deque()
        """streaming: finished runs; groups: complete groups; both in completion order."""
        self.opened = 0
        self.closed = False

    def assign(self) -> int | None:
        """The group of the next slot to run (oldest open group first); None once closed."""
        with self.cond:
            while not self.closed:
                for index, g in self.open.items():  # insertion order = oldest first
                    if g.assigned < self.group_size:
                        g.assigned += 1
                        return index
                if len(self.open) < self.max_open:
                    self.open[self.opened] = _Group()
                    self.opened += 1
                    continue
                self.cond.wait(0.1)
            return None

    def finish(self, run: Run) -> None:
        with self.cond:
            g = self.open[run.group]
            g.finished.append(run)
            if self.batching == "streaming":
                self.ready.append(run)
            elif len(g.finished) == self.group_size:
                self.ready.append(g.finished)
            self.cond.notify_all()

    def take(self, n: int) -> list[Run | list[Run]]:
        """The first n ready items (runs or complete groups); closes the groups fully taken."""
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.ready) >= n or self.closed, timeout=60):
                raise TimeoutError("no batch after 60 s: have the actor threads died?")
            items = [self.ready.popleft() for _ in range(min(n, len(self.ready)))]
            for item in items:
                for run in item if isinstance(item, list) else [item]:
                    g = self.open[run.group]
                    g.consumed += 1
                    if g.consumed == self.group_size:
                        del self.open[run.group]
            self.cond.notify_all()
            return items

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _learn(policy: _Policy, runs: list[Run], baselines: TaskBaselines, cfg: BiasConfig) -> None:
    """One SGD step on the logits with practicum.algo (the async learner's TIS objective)."""
    arms = torch.tensor([r.arm for r in runs])
    behaviour = torch.tensor([[r.logprob] for r in runs])
    rewards = torch.tensor([r.reward for r in runs])
    if cfg.advantage == "reward":
        adv = rewards
    elif cfg.batching == "groups":
        adv = group_advantages(rewards, torch.tensor([r.group for r in runs]), cfg.scale_by_std)
    else:
        tasks = [TASK] * len(runs)
        adv = baselines.advantages(tasks, rewards)
        baselines.update(tasks, rewards.tolist())
    dts = torch.tensor([r.seconds for r in runs])
    w = (
        duration_weights(dts, cfg.duration_floor * cfg.time_scale, cfg.duration_cap)
        if cfg.duration_weights
        else torch.ones_like(dts)
    )
    logp = torch.log_softmax(policy.logits, 0)[arms][:, None]  # [B, 1]: one token per run
    prox = logp.detach()
    token_loss, _ = ppo_clip_loss(logp, prox, adv[:, None])
    token_loss = token_loss * truncated_importance_weights(prox, behaviour, cfg.is_cap)
    aggregate_loss(token_loss * w[:, None], torch.ones_like(logp)).backward()
    with policy.lock, torch.no_grad():
        policy.logits -= cfg.lr * policy.logits.grad
        policy.logits.grad = None
        policy.version += 1


def run_bias_experiment(cfg: BiasConfig) -> BiasResult:
    """Train the tabular policy with concurrent actors for `cfg.steps` learner steps."""
    policy = _Policy(len(cfg.arms))
    board = SlotBoard(cfg.batching, cfg.group_size, (cfg.max_staleness + 1) * cfg.tasks_per_step)

    def actor(i: int) -> None:
        rng = random.Random(cfg.seed * 7919 + i)
        slice_end, k = 0.0, 0
        while (group := board.assign()) is not None:
            probs, version = policy.snapshot()
            if cfg.allocation == "per_action" or time.perf_counter() >= slice_end:
                k = rng.choices(range(len(cfg.arms)), weights=probs)[0]
                slice_end = time.perf_counter() + cfg.slice_seconds * cfg.time_scale
            arm = cfg.arms[k]
            seconds = run_for(draw_duration(rng, arm.seconds * cfg.time_scale, sigma=cfg.sigma))
            board.finish(Run(group, k, math.log(probs[k]), version, seconds, arm.reward))

    result = BiasResult(cfg, probs=[policy.snapshot()[0]])
    baselines = TaskBaselines(cfg.baseline_window)
    counts, lag = [0] * len(cfg.arms), []
    threads = [threading.Thread(target=actor, args=(i,), daemon=True) for i in range(cfg.actors)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    try:
        per_step = cfg.tasks_per_step * (cfg.group_size if cfg.batching == "streaming" else 1)
        for _ in range(cfg.steps):
            items = board.take(per_step)
            runs = [r for item in items for r in (item if isinstance(item, list) else [item])]
            for r in runs:
                counts[r.arm] += 1
                lag.append(policy.version - r.version)
            _learn(policy, runs, baselines, cfg)
            result.probs.append(policy.snapshot()[0])
        result.wall_seconds = time.perf_counter() - start
    finally:
        board.close()
        for t in threads:
            t.join(timeout=30)
    result.completions = {a.name: n for a, n in zip(cfg.arms, counts)}
    result.staleness_mean = sum(lag) / max(1, len(lag))
    return result
