"""Memory rendering; the generated corpus and questions: deterministic and answerable."""

from practicum.envs.flow.corpus import build_world, make_questions
from practicum.envs.flow.memory import Memory, Step
from practicum.envs.flow.tools import Lookup


def test_memory_renders_every_step_verbatim_in_order():
    m = Memory("What is 2+3?", files=[{"file_name": "a.csv", "description": "numbers"}])
    assert m.render() == "Query: What is 2+3?\nFiles: a.csv (numbers)\nActions so far: none."
    m.add(Step("calculator", "add them", "2+3", "5"))
    m.add(Step("search", "check | it", "x", "Error: no document matches", error=True))
    assert m.render() == (
        "Query: What is 2+3?\nFiles: a.csv (numbers)\n"
        "Action Step 1:\n  Tool: calculator\n  Sub-Goal: add them\n  Command: 2+3\n  Result: 5\n"
        "Action Step 2:\n  Tool: search\n  Sub-Goal: check | it\n  Command: x\n"
        "  Result: Error: no document matches"
    )


def test_world_and_questions_are_deterministic_in_the_seed():
    a, b, c = build_world(3), build_world(3), build_world(4)
    assert a.documents() == b.documents() and a.documents() != c.documents()
    qa, qb = make_questions(a, 30, 1), make_questions(b, 30, 1)
    assert [q.question for q in qa] == [q.question for q in qb] and len(qa) == 30
    assert [q.question for q in make_questions(a, 30, 2)] != [q.question for q in qa]


def test_every_question_is_answerable_by_one_lookup_per_hop():
    world = build_world(0)
    lookup = Lookup(world)
    for q in make_questions(world, 60, 5):
        assert len(q.relations) in (2, 3) and len(set(q.chain)) == len(q.chain)
        entity = q.start
        for rel in q.relations:
            out = lookup.run(f"{entity} | {rel}")
            assert not out.error, out.text
            entity = out.value
        assert entity == q.answer
        assert q.question.startswith(f"What is the {q.relations[-1]} of")
        # the answer needs the lookups: it is never in the question itself
        assert q.answer not in q.question
