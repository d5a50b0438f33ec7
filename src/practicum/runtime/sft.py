"""`practicum sft CONFIG`: a warm start on demonstrations or a teacher's trajectories.

SWE-Gym and SWE-smith fine-tune a model on a stronger agent's successful trajectories before
any RL; a policy that never solves a task gives rejection fine-tuning and RL nothing to learn
from (arXiv 2508.03501 starts its RFT from a 72B model that already solves 11%). Here:

    1. every training task (sft.tasks of them) runs sft.samples_per_task episodes in the real
       environment, each reply written by an actor instead of the policy:
         sft.source=demo     the suite's scripted demonstrator (`Suite.demonstrator`; for SWE,
                             gold patches of the training split only, `envs.swe.demo`)
         sft.source=teacher  the model `sft.teacher` through the model service (any
                             OpenAI-compatible server: `openai:<url>|<model>`), shown the same
                             chat the policy would see; its reply is cut after the first stop
                             string, as the policy's sampler cuts
       each reply is tokenized as the policy's own turn (then its end-of-turn token), so rows
       are token-exact in the policy's chat format;
    2. keep the episodes the environment graded solved (its reward comes from the real tests,
       never from the actor), not failed and not cut by length, as RFT keeps them;
    3. SFT on their policy tokens, malformed turns masked (`practicum.finetune`, sft.epochs / lr /
       batch_size), save RUN/sft/policy, evaluate held-out before and after.

Everything goes to RUN/sft/ (episodes.jsonl, eval/, policy/, summary.json); a finished run is
not redone. In a pipeline, `kind: sft` runs this stage and RFT / RL continue from its policy.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from practicum.config import Config
from practicum.engine.base import Sample, SamplingParams
from practicum.envs.base import Env, Message, Start, StepResult, Task
from practicum.episode import Episode
from practicum.errors import ConfigError
from practicum.finetune import stage_config
from practicum.report import solved
from practicum.runtime.progress import counting
from practicum.runtime.rft import evaluate, finished_summary, keep_and_finetune, stored_eval
from practicum.runtime.rollout import EpisodeBuilder, run_episode
from practicum.runtime.session import Session, open_session

Actor = Callable[[list[Message]], str]
"""Writes the next reply from the chat so far."""


class Transcript(Env):
    """An environment that also keeps its episode as chat messages (what an actor is shown)."""

    def __init__(self, env: Env):
        self.env = env
        self.messages: list[Message] = []
        self.stop_strings: list[str] = []

    def reset(self, task: Task, seed: int = 0) -> Start:
        start = self.env.reset(task, seed)
        self.messages, self.stop_strings = list(start.messages), list(start.stop_strings)
        return start

    def step(self, action: str) -> StepResult:
        self.messages.append({"role": "assistant", "content": action})
        result = self.env.step(action)
        if result.context is not None:
            self.messages = list(result.context)
        elif not result.done:
            self.messages.append({"role": "user", "content": result.observation})
        return result

    def close(self) -> None:
        self.env.close()

    def kill(self) -> None:
        self.env.kill()


def cut_at_stop(text: str, stops: list[str]) -> str:
    """`text` up to and including its first stop string (the policy's sampler stops there)."""
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return text[: min(ends)] if ends else text


def teacher_actor(s: Session, transcript: Transcript) -> Actor:
    client = s.models.client(s.cfg.sft.teacher)
    if client is None:
        raise ConfigError("config error at sft.teacher: 'rules' is not a model")
    params = SamplingParams(
        temperature=s.cfg.sft.temperature, max_new_tokens=s.cfg.sft.max_new_tokens
    )

    def act(messages: list[Message]) -> str:
        return cut_at_stop(client.complete(messages, params).text, transcript.stop_strings)

    return act


def demo_episode(
    s: Session, task: Task, gid: str, slot: int, make_actor: Callable[[Transcript], Actor]
) -> Episode:
    """One episode of `task` in a fresh environment, every reply written by the actor."""
    transcript = Transcript(s.suite.make_env(s.models))
    builder = EpisodeBuilder(
        transcript, task, gid, slot, s.chat, s.limits, s.sampling(0.0), s.cfg.run.seed
    )
    end = s.chat.encode(s.chat.reply_suffix)[:1]  # the end-of-turn token the policy must learn
    actor = make_actor(transcript) if not builder.done else None

    def generate(ids: list[int], params: SamplingParams, seed: int) -> tuple[Sample, int]:
        text = actor(transcript.messages)
        tokens = s.chat.encode_text(text) + end
        if len(tokens) > params.max_new_tokens:  # more than the policy could write: cut
            tokens = tokens[: params.max_new_tokens]
            text = s.chat.tokenizer.decode(tokens, skip_special_tokens=True)
            return Sample(tokens, [0.0] * len(tokens), text, "length"), 0
        return Sample(tokens, [0.0] * len(tokens), text, "stop"), 0

    episode = run_episode(builder, generate)
    episode.info["sft_source"] = s.cfg.sft.source
    return episode


def collect(s: Session, progress: bool) -> list[Episode]:
    """The episodes of every (training task, sample); those already stored are reused."""
    cfg = s.cfg.sft
    tasks = s.suite.train_tasks[: cfg.tasks or None]
    if cfg.source == "demo":
        demo = s.suite.demonstrator
        make = lambda task: lambda transcript: demo(task.task_id)  # noqa: E731
    else:
        make = lambda task: lambda transcript: teacher_actor(s, transcript)  # noqa: E731
    items = [
        (t, f"sft/{i}/{t.task_id}", k)
        for i, t in enumerate(tasks)
        for k in range(cfg.samples_per_task)
    ]
    done = {(e.group_id, e.info.get("slot")): e for e in s.store}
    todo = [it for it in items if (it[1], it[2]) not in done]
    kept = sum(solved(e, s.cfg.rft.min_reward) for e in done.values())
    with (
        ThreadPoolExecutor(max(1, s.cfg.rollout.env_workers)) as pool,
        counting(
            "sft demonstrations" if cfg.source == "demo" else "sft teacher episodes",
            len(items),
            len(items) - len(todo),
            enabled=progress,
            log_dir=s.run_dir,
        ) as count,
    ):
        for episode in pool.map(lambda it: demo_episode(s, it[0], it[1], it[2], make(it[0])), todo):
            s.store.append([episode])
            done[(episode.group_id, episode.info["slot"])] = episode
            kept += solved(episode, s.cfg.rft.min_reward)
            count.advance(info=f"solved {kept}")
    return [done[(g, k)] for _, g, k in items]


def run_sft(cfg: Config, progress: bool = True) -> dict:
    sub = stage_config(cfg, "sft", cfg.sft)
    if (finished := finished_summary(sub.run_dir)) is not None:
        return finished
    started = time.time()
    s = open_session(sub)
    try:
        if cfg.sft.source == "demo" and s.suite.demonstrator is None:
            raise ConfigError(
                f"config error at sft.source: environment {cfg.task.name!r} "
                f"has no demonstrator; use sft.source=teacher"
            )
        before = stored_eval(sub.run_dir, "before") or evaluate(s, "before sft", progress)
        episodes = collect(s, progress)
        kept, losses, after = keep_and_finetune(s, episodes, cfg.sft, "sft", before, progress)
    finally:
        s.close()
    summary = {
        "run_dir": str(sub.run_dir),
        "policy": str(sub.run_dir / "policy"),
        "source": cfg.sft.source,
        "teacher": cfg.sft.teacher,
        "sampled": len(episodes),
        "kept": len(kept),
        "tasks": len({e.task_id for e in episodes}),
        "tasks_with_a_kept_episode": len({e.task_id for e in kept}),
        "train_resolved_rate": len(kept) / len(episodes) if episodes else 0.0,
        "sft_updates": len(losses),
        "sft_loss_first": losses[0] if losses else None,
        "sft_loss_last": losses[-1] if losses else None,
        "eval_before": before,
        "eval_after": after,
        "wall_seconds": time.time() - started,
    }
    (sub.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
