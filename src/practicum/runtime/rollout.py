"""Running episodes: engine turns and timed environment steps assembled token-exactly.

`EpisodeBuilder` holds one episode in progress; `rollout_batch` advances many in lockstep
(one batched generate per round, environment steps in parallel threads, the sync runtime);
`run_episode` drives one episode turn by turn (an async actor). Environment failures end only
their own episode, with a logged reason and `failure_reward`.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from practicum.engine.base import Engine, Sample, SamplingParams
from practicum.engine.chat import ChatFormat
from practicum.envs.base import Env, StepResult, Task
from practicum.episode import Episode, Turn

log = logging.getLogger(__name__)


@dataclass
class RolloutLimits:
    max_turns: int = 3
    max_seq_len: int = 1024
    failure_reward: float = 0.0


class EpisodeBuilder:
    """One episode in progress: exact ids so far, turns, and whether it has ended."""

    def __init__(self, env: Env, task: Task, group_id: str, chat: ChatFormat, limits: RolloutLimits):
        self.env, self.chat, self.limits = env, chat, limits
        self.done = False
        try:
            first = env.reset(task)
            prompt = chat.prompt_ids(first, getattr(env, "system_prompt", None),
                                     getattr(env, "example_messages", None))
            failure = None
        except Exception as e:  # a broken task costs one episode, never the run
            prompt, failure = [], f"reset failed: {type(e).__name__}: {e}"
        self.episode = Episode(task_id=task.task_id, group_id=group_id, prompt_ids=prompt,
                               episode_id=uuid.uuid4().hex)
        self._ids = list(prompt)
        if failure:
            self._fail(failure)

    def current_ids(self) -> list[int]:
        return self._ids

    def budget(self) -> int:
        return self.limits.max_seq_len - len(self._ids)

    def add_action(self, sample: Sample, version: int) -> None:
        self.episode.turns.append(Turn(sampled_ids=list(sample.token_ids),
                                       logprobs=list(sample.logprobs), policy_version=version,
                                       action_text=sample.text,
                                       info={"finish_reason": sample.finish_reason}))
        self._ids += sample.token_ids
        if len(self._ids) >= self.limits.max_seq_len:
            self.episode.overlong = True

    def step_env(self) -> StepResult | None:
        """Run the environment on the last action (thread-safe per episode). None on failure."""
        turn = self.episode.turns[-1]
        start = time.perf_counter()
        try:
            result = self.env.step(turn.action_text)
        except Exception as e:
            turn.env_duration = time.perf_counter() - start
            log.warning("env step failed on %s: %s", self.episode.task_id, e)
            self._fail(f"env crashed: {type(e).__name__}: {e}",
                       traceback.format_exc(limit=3))
            return None
        turn.env_duration = result.duration or (time.perf_counter() - start)
        return result

    def apply(self, result: StepResult | None) -> None:
        if result is None or self.done:
            return
        turn = self.episode.turns[-1]
        turn.reward, turn.info = result.reward, {**turn.info, **result.info}
        if result.info.get("failure"):
            self._fail(str(result.info["failure"]), reward=result.reward)
            return
        if result.done:
            self._finish(result.reward)
        elif self.episode.overlong or len(self.episode.turns) >= self.limits.max_turns:
            self.episode.truncated = True
            self._finish(result.reward)
        else:
            turn.observation_text = result.observation
            turn.observation_ids = self.chat.observation_ids(result.observation, turn.sampled_ids)
            self._ids += turn.observation_ids
            if self.budget() <= 0:
                self.episode.overlong = self.episode.truncated = True
                self._finish(result.reward)

    def _finish(self, reward: float) -> None:
        self.episode.reward = float(reward)
        self.done = True
        self.env.close()

    def _fail(self, reason: str, detail: str = "", reward: float | None = None) -> None:
        self.episode.failure = reason
        if detail:
            self.episode.info["traceback"] = detail
        self._finish(self.limits.failure_reward if reward is None else reward)


def run_episode(
    env: Env,
    task: Task,
    group_id: str,
    chat: ChatFormat,
    limits: RolloutLimits,
    generate: Callable[[list[int]], tuple[Sample, int]],
) -> Episode:
    """Run one episode turn by turn. `generate(ids)` returns a sample and the policy version of
    the weights that produced it, so each turn records its own version and new weights are picked
    up between turns. A failed generate call ends the episode like an environment failure."""
    b = EpisodeBuilder(env, task, group_id, chat, limits)
    while not b.done:
        try:
            sample, version = generate(b.current_ids())
        except CancelledError:  # the runtime is shutting down
            b._fail("generation cancelled")
            break
        except Exception as e:
            log.warning("generation failed on %s: %s", task.task_id, e)
            b._fail(f"generation failed: {type(e).__name__}: {e}", traceback.format_exc(limit=3))
            break
        b.add_action(sample, version)
        b.apply(b.step_env())
    return b.episode


def rollout_batch(
    engine: Engine,
    chat: ChatFormat,
    make_env: Callable[[], Env],
    tasks: list[Task],
    group_ids: list[str],
    params: SamplingParams,
    limits: RolloutLimits,
    env_workers: int = 8,
    seed: int | None = None,
) -> list[Episode]:
    """Run one episode per (task, group id), all in lockstep, and return them in order."""
    builders = [EpisodeBuilder(make_env(), t, g, chat, limits) for t, g in zip(tasks, group_ids)]
    stop_ids = sorted(set(params.stop_token_ids) | set(chat.stop_ids()))
    env_stops = list(getattr(builders[0].env, "stop_strings", None) or []) if builders else []
    stop_strings = list(dict.fromkeys([*params.stop_strings, *env_stops]))
    with ThreadPoolExecutor(max_workers=env_workers) as pool:
        for round_ in range(limits.max_turns):
            active = [b for b in builders if not b.done]
            if not active:
                break
            p = SamplingParams(temperature=params.temperature, top_p=params.top_p,
                               max_new_tokens=params.max_new_tokens,
                               stop_strings=stop_strings,
                               stop_token_ids=stop_ids,
                               seed=None if seed is None else seed * 1000 + round_)
            samples = engine.generate([b.current_ids() for b in active], p)
            for b, s in zip(active, samples):
                b.add_action(s, engine.version)
            results = list(pool.map(EpisodeBuilder.step_env, active))
            for b, r in zip(active, results):
                b.apply(r)
    for b in builders:
        if not b.done:  # loop ended by max_turns without a final step result
            b.episode.truncated = True
            b._finish(b.episode.turns[-1].reward if b.episode.turns else 0.0)
    return [b.episode for b in builders]
