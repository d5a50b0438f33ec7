"""`task.options` of the flow environment and its suite (world, tools, tasks, roles)."""

from __future__ import annotations

import random
from functools import partial
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from practicum.envs.flow.corpus import build_world
from practicum.envs.flow.demo import Demonstrator
from practicum.envs.flow.env import FlowEnv
from practicum.envs.flow.roles import Roles, RoleSpecs, RoleTokens
from practicum.envs.flow.tasks import FAMILIES, split_tasks
from practicum.envs.flow.tools import TOOL_NAMES, Search
from practicum.envs.flow.user_data import DocCorpus, load_corpus, load_questions
from practicum.envs.registry import Suite, SuiteContext
from practicum.envs.sandbox import Limits

ToolName = Literal["python_coder", "calculator", "search", "lookup"]


class FlowOptions(BaseModel):
    """`task.options` of the flow environment."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["flow", "direct", "tool_integrated"] = Field(
        "flow",
        description="flow = planner/executor/verifier/generator with memory; the "
        "ablation's baselines: direct (the policy answers alone) or tool_integrated (the "
        "policy calls the tools itself in one sequence).",
    )
    families: dict[str, float] = Field(
        {"multihop": 0.4, "arithmetic": 0.3, "gsm": 0.2, "countdown": 0.1},
        description=f"Task families ({', '.join(FAMILIES)}) and their training weights.",
    )
    train_size: int = Field(400, gt=0, description="Generated training tasks.")
    eval_per_family: int = Field(
        16, gt=0, description="Held-out tasks per family (disjoint questions, a different seed)."
    )
    tools: list[ToolName] = Field(
        list(TOOL_NAMES), min_length=1, description="Tools shown to the planner and executor."
    )
    max_steps_train: int = Field(
        3, ge=1, description="Planner turns per training episode (the paper's TOOL_STEPS=3)."
    )
    max_steps_eval: int = Field(
        10,
        ge=1,
        description="Planner turns per held-out episode "
        "(the paper's max_steps=10); rollout.max_turns must allow it.",
    )
    max_seconds_train: float = Field(
        120.0,
        gt=0,
        description="Time limit of a training episode's flow (checked after each step).",
    )
    max_seconds_eval: float = Field(300.0, gt=0, description="Time limit of a held-out episode.")
    analyst: str = Field(
        "base",
        description="Backend of the query analysis: policy, base, "
        "local:<model>, openai:<url>|<model> or rules (= no analysis).",
    )
    executor: str = Field(
        "base",
        description="Backend of the executor (writes tool commands); "
        "rules = entity/relation/expression taken from the sub-goal.",
    )
    verifier: str = Field(
        "base",
        description="Backend of the verifier (STOP/CONTINUE); rules = "
        "stop once the query's asked relation or a number was found (on your "
        "own documents: once the last one on the chain names the asked "
        "relation, `flow.freetext`).",
    )
    generator: str = Field(
        "base",
        description="Backend of the generator (final answer); "
        "rules = the value of the last successful step (on your own "
        "documents: the span of the asked kind, `flow.freetext`).",
    )
    judge: str | None = Field(
        None,
        description="Optional judge backend: an answer the exact "
        "check rejects still counts when the judge says equivalent.",
    )
    executor_tokens: int = Field(48, gt=0, description="Token budget of an executor reply.")
    verifier_tokens: int = Field(48, gt=0, description="Token budget of a verifier reply.")
    generator_tokens: int = Field(32, gt=0, description="Token budget of a generator reply.")
    analyst_tokens: int = Field(64, gt=0, description="Token budget of the query analysis.")
    world_seed: int | None = Field(
        None, description="Seed of the generated corpus (None = the run seed)."
    )
    wall_seconds: float = Field(5.0, gt=0, description="Time limit of one sandboxed run.")
    hop_credit: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Reward per episode for the "
        "fraction of a multihop task's chain hops that some successful "
        "tool result shows (added to the 0/1 exact-match reward; below "
        "1 so any solved episode outranks any unsolved one); 0 = the "
        "paper's outcome reward only.",
    )
    planner_grammar_chars: int | None = Field(
        100,
        ge=8,
        description="Each planner turn must "
        "match the plan grammar (Context / Sub-Goal of "
        "at most this many characters / Tool Name from "
        "the tools), for samplers that honour "
        "`grammar`; null = free text.",
    )
    planner_grammar_tokens: int = Field(
        24,
        ge=4,
        description="The plan grammar's cap on "
        "Context and on Sub-Goal, in tokens (two fields and "
        "the fixed text fit a 64-token turn).",
    )
    questions: str | None = Field(
        None,
        description="JSONL of your own search questions "
        "({question, answer, chain?: [document titles in hop "
        "order], id?, split?: train|eval}); they replace the "
        "generated multihop questions. Needs `corpus`.",
    )
    corpus: str | None = Field(
        None,
        description="Your own documents for search and lookup: "
        "a folder of .txt/.md files (title = file name) or a JSONL of "
        "{title, text}; replaces the generated world. Needs "
        "`questions`.",
    )

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(FAMILIES))
        if bad:
            raise ValueError(f"unknown family {bad[0]!r} (known: {', '.join(FAMILIES)})")
        if not any(w > 0 for w in v.values()):
            raise ValueError("give at least one family a positive weight")
        return v

    @model_validator(mode="after")
    def _user_data_together(self) -> "FlowOptions":
        if (self.questions is None) != (self.corpus is None):
            raise ValueError(
                "questions and corpus go together (a question needs the documents that answer it)"
            )
        if self.questions is not None and self.families.get("multihop", 0) <= 0:
            raise ValueError(
                "questions replace the multihop family: give multihop a positive weight"
            )
        return self

    @field_validator("analyst", "executor", "verifier", "generator", "judge")
    @classmethod
    def _spec(cls, v: str | None) -> str | None:
        from practicum.engine.service import check_spec

        if v is not None:
            check_spec(v)
        return v


def flow_suite(opts: FlowOptions, ctx: SuiteContext) -> Suite:
    """AgentFlow: trainable planner, frozen executor/verifier/generator, shared memory, offline
    tools (python, calculator, BM25 search, lookup) on generated multi-hop and reasoning-gym
    math tasks; or the user's own questions and documents in place of the generated world."""
    if opts.corpus is not None:
        world = load_corpus(opts.corpus)
        train, held_out = user_split(opts, world, ctx.seed)
    else:
        world = build_world(ctx.seed if opts.world_seed is None else opts.world_seed)
        train, held_out = split_tasks(
            opts.families, opts.train_size, opts.eval_per_family, ctx.seed, world
        )
    search = Search(world) if "search" in opts.tools else None  # one index, shared
    demonstrator = Demonstrator(
        train,
        opts.planner_grammar_tokens,  # training tasks only
        opts.planner_grammar_chars or 100,
    )
    return Suite(
        partial(make_flow_env, opts, world, search), train, held_out, demonstrator=demonstrator
    )


def user_split(opts: FlowOptions, corpus, seed: int):
    """The user's questions as the multihop family (their share of `train_size` at most, all
    of them when fewer), the other families generated as usual."""
    mine, held = load_questions(opts.questions, corpus, opts.eval_per_family, seed)
    total = sum(opts.families.values())
    mine = mine[: max(1, round(opts.train_size * opts.families["multihop"] / total))]
    others = {f: w for f, w in opts.families.items() if f != "multihop" and w > 0}
    if not others:
        return mine, held
    n_other = max(1, opts.train_size - len(mine))
    train, other_held = split_tasks(others, n_other, opts.eval_per_family, seed, None)
    train = mine + train
    random.Random(seed).shuffle(train)
    groups = [held] + [[t for t in other_held if t.data["family"] == f] for f in sorted(others)]
    width = max(len(g) for g in groups)
    mixed = [g[i] for i in range(width) for g in groups if i < len(g)]
    return train, mixed


def make_flow_env(opts: FlowOptions, world, search, service=None):
    from practicum.envs.flow.baselines import DirectEnv, ToolIntegratedEnv

    specs = RoleSpecs(opts.analyst, opts.executor, opts.verifier, opts.generator, opts.judge)
    tokens = RoleTokens(
        opts.analyst_tokens, opts.executor_tokens, opts.verifier_tokens, opts.generator_tokens
    )
    limits = Limits(
        wall_seconds=opts.wall_seconds, memory_mb=512, max_processes=8, output_bytes=2000
    )
    if opts.mode == "direct":
        return DirectEnv()
    if opts.mode == "tool_integrated":
        return ToolIntegratedEnv(
            world, list(opts.tools), limits, (opts.max_steps_train, opts.max_steps_eval), search
        )
    roles = Roles(service, specs, world.titles, tokens, relational=not isinstance(world, DocCorpus))
    return FlowEnv(
        roles,
        world,
        list(opts.tools),
        limits,
        (opts.max_steps_train, opts.max_steps_eval),
        (opts.max_seconds_train, opts.max_seconds_eval),
        search,
        opts.hop_credit,
        opts.planner_grammar_chars,
        opts.planner_grammar_tokens,
    )
