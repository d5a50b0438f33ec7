"""Episodes assembled token-exactly: length budgets, the overlong flag, fresh-context segments,
seeds, environment failures."""

import pytest

from practicum.engine.base import Sample, SamplingParams, derive_seed
from practicum.engine.chat import ChatFormat
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.runtime.rollout import EpisodeBuilder, RolloutLimits, run_episode


@pytest.fixture(scope="module")
def chat(tiny_model_dir):
    from transformers import AutoTokenizer

    return ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))


class ScriptEnv(Env):
    """Plays back a list of StepResults; records the seed it was reset with."""

    def __init__(self, results):
        self.results, self.seed, self.closed = list(results), None, False

    def reset(self, task, seed=0):
        self.seed = seed
        return Start([{"role": "user", "content": "go"}], ["STOP"])

    def step(self, action):
        r = self.results.pop(0)
        if isinstance(r, Exception):
            raise r
        return r

    def close(self):
        self.closed = True


def generator(lengths, record=None):
    """generate(ids, params, seed): samples of the given lengths (cut at max_new_tokens)."""
    lengths = list(lengths)

    def generate(ids, params, seed):
        n = lengths.pop(0)
        if record is not None:
            record.append((len(ids), params.max_new_tokens, seed, params.stop_strings))
        out = list(range(100, 100 + min(n, params.max_new_tokens)))
        reason = "length" if n >= params.max_new_tokens else "stop"
        return Sample(out, [-0.5] * len(out), "x", reason), 3

    return generate


def build(chat, results, max_turns=4, max_seq_len=200, max_new=10, gid="g0/t", slot=0):
    env = ScriptEnv(results)
    b = EpisodeBuilder(
        env,
        Task("t"),
        gid,
        slot,
        chat,
        RolloutLimits(max_turns, max_seq_len, -2.0),
        SamplingParams(max_new_tokens=max_new),
        run_seed=5,
    )
    return b, env


def test_generation_is_capped_to_the_room_left_and_marked_budget(chat):
    calls = []
    room = 30
    prompt = len(chat.render([{"role": "user", "content": "go"}]))
    b, _ = build(
        chat, [StepResult("obs"), StepResult("obs")], max_seq_len=prompt + room, max_new=10
    )
    ep = run_episode(b, generator([50, 50], calls))
    assert calls[0][1] == 10  # the turn budget, below the room left
    assert calls[1][1] == room - 10 - len(ep.turns[0].observation_ids)  # capped to what is left
    assert [t.finish_reason for t in ep.turns] == ["length", "budget"]
    assert ep.overlong and ep.truncated  # the outcome was decided by length


def test_a_cut_turn_mid_episode_is_marked_but_a_normal_ending_is_not_overlong(chat):
    b, env = build(
        chat,
        [
            StepResult("obs", malformed=True),
            StepResult(reward=1.0, done=True, solved=True, metrics={"k": 2.0}),
        ],
    )
    ep = run_episode(b, generator([50, 3]))
    assert [t.cut for t in ep.turns] == [True, False] and not ep.overlong
    assert [t.malformed for t in ep.turns] == [True, False]
    assert ep.reward == 1.0 and ep.solved is True and ep.metrics == {"k": 2.0} and env.closed


def test_a_final_turn_cut_by_max_new_tokens_makes_the_episode_overlong(chat):
    ep = run_episode(build(chat, [StepResult(reward=1.0, done=True)])[0], generator([50]))
    assert ep.overlong and not ep.truncated and ep.turns[0].finish_reason == "length"


def test_an_observation_that_fills_the_row_ends_the_episode_overlong(chat):
    b, _ = build(chat, [StepResult("word " * 300)], max_seq_len=150)
    ep = run_episode(b, generator([3, 3]))
    assert len(ep.turns) == 1 and ep.overlong and ep.truncated


def test_a_fresh_context_starts_a_new_row_token_exactly(chat):
    ctx = [{"role": "user", "content": "memory: step 1 done"}]
    b, _ = build(
        chat, [StepResult("obs"), StepResult(context=ctx), StepResult(reward=1.0, done=True)]
    )
    calls = []
    ep = run_episode(b, generator([3, 3, 3], calls))
    rows = ep.segments()
    fresh = chat.render(ctx)
    assert ep.turns[2].context_ids == fresh and len(rows) == 2
    assert rows[0].input_ids == (
        ep.prompt_ids
        + ep.turns[0].sampled_ids
        + ep.turns[0].observation_ids
        + ep.turns[1].sampled_ids
    )
    assert rows[1].input_ids == fresh + ep.turns[2].sampled_ids
    assert calls[2][0] == len(fresh)  # the third turn was sampled from the fresh context only


def test_seeds_differ_per_turn_and_episode_and_repeat_exactly(chat):
    def seeds(gid, slot):
        calls = []
        b, env = build(chat, [StepResult("o"), StepResult(done=True)], gid=gid, slot=slot)
        run_episode(b, generator([2, 2], calls))
        return [c[2] for c in calls], env.seed

    first, env_seed = seeds("g0/t", 0)
    assert seeds("g0/t", 0) == (first, env_seed)
    assert len(set(first)) == 2
    others = seeds("g0/t", 1)[0] + seeds("g1/t", 0)[0]
    assert not set(first) & set(others)
    assert first[0] == derive_seed(derive_seed(5, "g0/t", 0), 0)


def test_env_stop_strings_are_added_to_the_sampling_params(chat):
    calls = []
    run_episode(build(chat, [StepResult(done=True)])[0], generator([2], calls))
    assert calls[0][3] == ("STOP",)


def test_env_crash_and_env_reported_failure_end_only_the_episode(chat):
    ep = run_episode(build(chat, [RuntimeError("boom")])[0], generator([2]))
    assert ep.failure == "env crashed: RuntimeError: boom" and ep.reward == -2.0
    ep = run_episode(
        build(chat, [StepResult(reward=-5.0, done=True, failure="sandbox down")])[0], generator([2])
    )
    assert ep.failure == "sandbox down" and ep.reward == -5.0


def test_failed_generation_and_failed_reset(chat):
    def broken(ids, params, seed):
        raise RuntimeError("out of memory (pretend)")

    ep = run_episode(build(chat, [])[0], broken)
    assert ep.failure == "generation failed: RuntimeError: out of memory (pretend)"
    assert ep.turns == [] and ep.reward == -2.0

    class NoReset(ScriptEnv):
        def reset(self, task, seed=0):
            raise ValueError("bad task file")

    b = EpisodeBuilder(
        NoReset([]),
        Task("t"),
        "g0/t",
        0,
        chat,
        RolloutLimits(failure_reward=-1),
        SamplingParams(),
        0,
    )
    assert b.done and b.episode.failure == "reset failed: ValueError: bad task file"


# -- grammars -------------------------------------------------------------------------------------
WORD = "start: /[a-z]{1,8}/"
CALL = 'start: "call(" /[a-z]+/ ")"'


class GrammarEnv(ScriptEnv):
    """A ScriptEnv whose first turn is constrained by `grammar`."""

    def __init__(self, results, grammar):
        super().__init__(results)
        self.grammar = grammar

    def reset(self, task, seed=0):
        return Start([{"role": "user", "content": "go"}], grammar=self.grammar)


def grammar_build(chat, results, grammar):
    return EpisodeBuilder(
        GrammarEnv(results, grammar),
        Task("t"),
        "g0/t",
        0,
        chat,
        RolloutLimits(4, 400, -2.0),
        SamplingParams(max_new_tokens=10),
        0,
    )


def test_each_turn_is_sampled_under_the_grammar_the_env_gave_last_and_records_it(chat):
    ctx = [{"role": "user", "content": "fresh"}]
    seen = []

    def generate(ids, params, seed):
        seen.append(params.grammar)
        return Sample([100, 101, 102], [-0.5] * 3, "x", "stop"), 1

    steps = [
        StepResult("o", grammar=CALL),
        StepResult("o"),
        StepResult(context=ctx, grammar=CALL),
        StepResult(done=True),
    ]
    ep = run_episode(grammar_build(chat, steps, WORD), generate)
    assert seen == [WORD, CALL, None, CALL]
    assert [t.grammar for t in ep.turns] == seen
    first, second = ep.segments()
    p, obs = len(ep.prompt_ids), len(ep.turns[0].observation_ids)
    # row 1: prompt | turn 0 (WORD) | obs | turn 1 (CALL) | obs | turn 2 (free)
    assert first.constrained == [(p, p + 3, WORD), (p + 3 + obs, p + 6 + obs, CALL)]
    assert first.input_ids[p + 3 + obs : p + 6 + obs] == [100, 101, 102]
    n = len(chat.render(ctx))
    assert second.constrained == [(n, n + 3, CALL)]  # row 2: the fresh context | turn 3


def test_a_malformed_grammar_ends_the_episode_with_a_named_failure(chat):
    b = grammar_build(chat, [], 'start: "a" missing')
    assert b.done and b.episode.failure.startswith("reset failed: GrammarError: grammar error")
    assert "missing" in b.episode.failure
    ep = run_episode(
        grammar_build(chat, [StepResult("o", grammar="start: (")], WORD), generator([2, 2])
    )
    assert ep.failure.startswith("env gave a bad grammar: grammar error") and len(ep.turns) == 1
