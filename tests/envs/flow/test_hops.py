"""Per-hop partial credit and the executor's entity rule, through the real env with rules roles
and scripted planners. Red team: repeating hop 1, listing every entity or copying the query
earns no more than honest hops; only naming each hop's entity solves."""

import pytest

from practicum.envs.flow.tasks import chain_hops, hop_fraction
from practicum.envs.registry import SuiteContext, build_suite

RULES = {"analyst": "rules", "executor": "rules", "verifier": "rules", "generator": "rules"}


@pytest.fixture(scope="module")
def suite():
    return build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1},
            "train_size": 12,
            "eval_per_family": 1,
            "tools": ["search", "lookup"],
        },
        SuiteContext(0),
    )


def plan(sub_goal, tool="lookup", context="none"):
    return f"Context: {context}\nSub-Goal: {sub_goal}\nTool Name: {tool}"


def run(suite, task, planner):
    """One episode; `planner(step, memory, task)` writes each plan."""
    env = suite.make_env(None)
    env.reset(task)
    try:
        for i in range(env.max_steps):
            r = env.step(planner(i, env.memory, task))
            if r.done:
                return r, env.memory
    finally:
        env.close()
    raise AssertionError("the episode did not end within max_steps")


WORDS = {"founded": "founding year", "born": "birth year"}  # how a planner would say them


def said(relation):
    return WORDS.get(relation, relation)


def honest(i, memory, task):
    chain, rels = task.data["chain"], task.data["relations"]
    i = min(i, len(rels) - 1)
    return plan(f"Find the {said(rels[i])} of {chain[i]}.")


def entity_in_context(i, memory, task):
    """The hop's entity only in Context (where the last result put it), none in the Sub-Goal."""
    rels = task.data["relations"]
    ctx = memory.steps[-1].result if memory.steps else task.data["question"]
    return plan(f"Find the {said(rels[min(i, len(rels) - 1)])}.", context=ctx)


def repeat_hop_1(i, memory, task):
    return honest(0, memory, task)


def copy_query(i, memory, task):
    return plan(task.data["question"])


def every_entity(suite):
    titles = ", ".join(suite.make_env(None).world.titles)

    def planner(i, memory, task):
        rels = task.data["relations"]
        return plan(
            f"Find the {said(rels[min(i, len(rels) - 1)])} of {titles}.",
            context=", ".join(s.value for s in memory.steps) or "none",
        )

    return planner


def test_honest_hops_solve_every_task_and_earn_full_hop_credit(suite):
    for task in suite.train_tasks:
        r, _ = run(suite, task, honest)
        assert r.solved and r.metrics["hops/multihop"] == 1.0 and r.reward == 1.5


def test_the_executor_resolves_the_entity_produced_most_recently(suite):
    """Before: the longest title in Context (often the start entity) was looked up again."""
    for task in suite.train_tasks:
        r, memory = run(suite, task, entity_in_context)
        assert r.solved, [s.command for s in memory.steps]


@pytest.mark.parametrize("name", ["repeat_hop_1", "copy_query", "every_entity"])
def test_gaming_planners_earn_no_more_than_honest_hops(suite, name):
    planner = {
        "repeat_hop_1": repeat_hop_1,
        "copy_query": copy_query,
        "every_entity": every_entity(suite),
    }[name]
    total_honest = total = 0.0
    for task in suite.train_tasks:
        fair, _ = run(suite, task, honest)
        r, memory = run(suite, task, planner)
        assert r.reward <= fair.reward and not r.solved, (name, task.data["question"])
        assert r.metrics["hops/multihop"] <= 1 / len(task.data["relations"])
        total_honest, total = total_honest + fair.reward, total + r.reward
    assert total < total_honest / 3


def names_only(i, memory, task):
    """Names each hop's entity but no attribute: lookup answers with an error that quotes the
    entity's whole document (every fact of it, the next hop's entity among them)."""
    chain = task.data["chain"]
    return plan(f"Look up {chain[min(i, len(chain) - 2)]}.")


def test_a_lookup_that_failed_earns_no_hop_credit(suite):
    for task in suite.train_tasks[:4]:
        r, memory = run(suite, task, names_only)
        assert all(s.error and "name an attribute" in s.result for s in memory.steps[:2])
        assert r.metrics["hops/multihop"] == 0.0 and r.reward == 0.0, [
            s.result for s in memory.steps
        ]


def test_a_copied_query_looks_up_hop_1_again_and_never_skips_ahead(suite):
    task = next(t for t in suite.train_tasks if len(t.data["relations"]) == 3)
    r, memory = run(suite, task, copy_query)
    chain, rels = task.data["chain"], task.data["relations"]
    assert {s.command for s in memory.steps} == {f"{chain[0]} | {rels[0]}"}
    assert r.metrics["hops/multihop"] == pytest.approx(1 / 3)


def test_hop_fraction_reads_one_document_at_a_time_and_counts_each_hop_once():
    hops = chain_hops(["Velor Works", "Kamir Sa", "Dalka"])
    assert hops == [["Velor Works", "Kamir Sa"], ["Kamir Sa", "Dalka"]]
    lookup = "The founder of Velor Works is Kamir Sa."
    assert hop_fraction(hops, [lookup, lookup, lookup]) == 0.5
    # two documents returned together never make one hop's evidence
    assert hop_fraction(hops, ["Kamir Sa is a person. | Dalka is a city."]) == 0.0
    assert hop_fraction(hops, ["Kamir Sa was born in Dalka. | x"]) == 1.0 - 0.5
    # whole names only: "Dalkan" is not "Dalka"
    assert hop_fraction(hops, ["Kamir Sa was born in Dalkan."]) == 0.0
    assert hop_fraction([], [lookup]) == 0.0


def test_hop_credit_is_an_option_and_zero_gives_the_papers_outcome_reward():
    s = build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1},
            "train_size": 2,
            "eval_per_family": 1,
            "tools": ["lookup"],
            "hop_credit": 0.0,
        },
        SuiteContext(0),
    )
    task = s.train_tasks[0]
    r, _ = run(s, task, repeat_hop_1)
    assert r.reward == 0.0 and r.metrics["hops/multihop"] > 0
    r, _ = run(s, task, honest)
    assert r.reward == 1.0
