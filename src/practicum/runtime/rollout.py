"""Running episodes: engine turns and timed environment steps assembled token-exactly.

`EpisodeBuilder` holds one episode in progress; `rollout_batch` advances many in lockstep (one
batched generate per round through the generation server, environment steps in parallel
threads: the sync runtime and evaluation); `run_episode` drives one episode turn by turn (an
async actor). Environment failures end only their own episode, with a logged reason.

Length: every turn's generation is capped to the room left in its row (`max_seq_len`), and a
turn stopped by a length limit is marked (`Turn.finish_reason` 'length' or 'budget'). An
episode is overlong when its outcome was decided by length: its final turn was cut, or its
row had no room for another turn.

Grammars: a turn is sampled under the grammar the environment gave last (`Start.grammar`, then
each `StepResult.grammar`; None = free text) and records it (`Turn.grammar`), so the learner can
replay it; a grammar llguidance cannot compile ends the episode with a named failure.

Seeds: an episode's randomness (the environment's, and every turn's sampling) derives from the
run seed, its group id and its slot, so a resumed run re-samples a lost episode identically and
no two turns or rows share a seed.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable

from practicum.engine.base import Sample, SamplingParams, derive_seed
from practicum.engine.chat import ChatFormat
from practicum.engine.constraint import GrammarError, compiled
from practicum.engine.server import GenerationServer
from practicum.envs.base import Env, StepResult, Task
from practicum.episode import Episode, Turn

log = logging.getLogger(__name__)


@dataclass
class RolloutLimits:
    max_turns: int = 3
    max_seq_len: int = 1024
    failure_reward: float = 0.0


def checked(grammar: str | None) -> str | None:
    """The grammar an environment gave for the next turn, refused with a `GrammarError` naming
    it when llguidance cannot compile it (the episode ends with that reason)."""
    if grammar is not None:
        compiled(grammar)
    return grammar


class EpisodeBuilder:
    """One episode in progress: the ids of its current row, its turns, whether it has ended."""

    def __init__(
        self,
        env: Env,
        task: Task,
        group_id: str,
        slot: int,
        chat: ChatFormat,
        limits: RolloutLimits,
        params: SamplingParams,
        run_seed: int,
    ):
        self.env, self.chat, self.limits = env, chat, limits
        self.seed = derive_seed(run_seed, group_id, slot)
        self.done = False
        self.episode = Episode(
            task_id=task.task_id,
            group_id=group_id,
            prompt_ids=[],
            episode_id=uuid.uuid4().hex,
            info={"slot": slot},
        )
        self._row: list[int] = []
        self._context: list[int] | None = None  # the next turn's fresh prompt, when set
        self.grammar: str | None = None
        """The grammar the next turn is sampled under (the environment's last word on it)."""
        self.params = params
        try:
            start = env.reset(replace(task, group=group_id), derive_seed(self.seed, "env"))
            self.episode.prompt_ids = self._row = chat.render(start.messages)
            stops = tuple(dict.fromkeys([*params.stop_strings, *start.stop_strings]))
            self.params = replace(
                params,
                stop_strings=stops,
                stop_token_ids=tuple(sorted({*params.stop_token_ids, *chat.stop_ids()})),
            )
            self.grammar = checked(start.grammar)
        except Exception as e:  # a broken task costs one episode, never the run
            self._fail(f"reset failed: {type(e).__name__}: {e}", traceback.format_exc(limit=3))

    def run(
        self, generate: Callable[[list[int], SamplingParams, int], tuple[Sample, int]]
    ) -> Episode:
        """Run the episode turn by turn (`run_episode`)."""
        return run_episode(self, generate)

    def request(self) -> tuple[list[int], SamplingParams, int] | None:
        """(row ids, params capped to the room left, seed) for the next turn; None (and the
        episode ends, overlong) when the row has no room left."""
        room = self.limits.max_seq_len - len(self._row)
        if room <= 0:
            self.episode.overlong = self.episode.truncated = True
            self._finish(self.episode.turns[-1].reward if self.episode.turns else 0.0)
            return None
        params = replace(self.params, grammar=self.grammar)
        if room < params.max_new_tokens:
            params = replace(params, max_new_tokens=room)
        return self._row, params, derive_seed(self.seed, len(self.episode.turns))

    def add_action(self, sample: Sample, version: int, params: SamplingParams) -> None:
        reason = sample.finish_reason
        if reason == "length" and params.max_new_tokens < self.params.max_new_tokens:
            reason = "budget"
        self.episode.turns.append(
            Turn(
                sampled_ids=list(sample.token_ids),
                logprobs=list(sample.logprobs),
                policy_version=version,
                context_ids=self._context,
                action_text=sample.text,
                finish_reason=reason,
                grammar=params.grammar,
            )
        )
        self._context = None
        self._row = self._row + list(sample.token_ids)

    def step_env(self) -> StepResult | None:
        """Run the environment on the last action (thread-safe per episode). None on failure."""
        turn = self.episode.turns[-1]
        start = time.perf_counter()
        try:
            result = self.env.step(turn.action_text)
        except Exception as e:
            turn.env_duration = time.perf_counter() - start
            log.warning("env step failed on %s: %s", self.episode.task_id, e)
            self._fail(f"env crashed: {type(e).__name__}: {e}", traceback.format_exc(limit=3))
            return None
        turn.env_duration = result.duration or (time.perf_counter() - start)
        return result

    def apply(self, result: StepResult | None) -> None:
        if result is None or self.done:
            return
        e, turn = self.episode, self.episode.turns[-1]
        turn.reward, turn.malformed, turn.info = result.reward, result.malformed, result.info
        e.metrics = dict(result.metrics)
        if result.failure:
            self._fail(result.failure, reward=result.reward)
            return
        if result.done:
            e.solved = result.solved
            e.overlong = turn.cut
            self._finish(result.reward)
            return
        if len(e.turns) >= self.limits.max_turns:
            e.truncated, e.overlong = True, turn.cut
            self._finish(result.reward)
            return
        try:
            self.grammar = checked(result.grammar)
        except GrammarError as err:
            self._fail(f"env gave a bad grammar: {err}", reward=result.reward)
            return
        if result.context is not None:  # the next turn starts a new row
            self._context = self._row = self.chat.render(result.context)
        else:
            turn.observation_text = result.observation
            turn.observation_ids = self.chat.observation_ids(result.observation, turn.sampled_ids)
            self._row = self._row + turn.observation_ids

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
    builder: EpisodeBuilder,
    generate: Callable[[list[int], SamplingParams, int], tuple[Sample, int]],
) -> Episode:
    """Run one episode turn by turn. `generate(ids, params, seed)` returns a sample and the
    policy version that produced it, so each turn records its own version and new weights are
    picked up between turns. A failed generate call ends the episode like an env failure."""
    b = builder
    while not b.done:
        req = b.request()
        if req is None:
            break
        try:
            sample, version = generate(*req)
        except CancelledError:  # the runtime is shutting down
            b._fail("generation cancelled")
            break
        except Exception as e:
            log.warning("generation failed on %s: %s", b.episode.task_id, e)
            b._fail(f"generation failed: {type(e).__name__}: {e}", traceback.format_exc(limit=3))
            break
        b.add_action(sample, version, req[1])
        b.apply(b.step_env())
    return b.episode


def rollout_batch(
    server: GenerationServer,
    builders: list[EpisodeBuilder],
    env_workers: int = 8,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run the episodes in lockstep (one batched generate per round) and return them;
    `on_episode(episode)` is called as each one ends (progress)."""
    reported: set[int] = set()

    def report() -> None:
        for i, b in enumerate(builders):
            if b.done and i not in reported:
                reported.add(i)
                if on_episode is not None:
                    on_episode(b.episode)

    with ThreadPoolExecutor(max_workers=env_workers) as pool:
        while True:
            report()
            active = [b for b in builders if not b.done]
            requests = [(b, b.request()) for b in active]
            requests = [(b, r) for b, r in requests if r is not None]
            if not requests:
                break
            outs = server.generate_batch([r for _, r in requests])
            stepping = []
            for (b, r), (sample, version) in zip(requests, outs):
                if isinstance(sample, BaseException):
                    b._fail(f"generation failed: {type(sample).__name__}: {sample}")
                    continue
                b.add_action(sample, version, r[1])
                stepping.append(b)
            for b, result in zip(stepping, pool.map(EpisodeBuilder.step_env, stepping)):
                b.apply(result)
    report()
    return [b.episode for b in builders]
