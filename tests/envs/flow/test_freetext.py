"""The rules roles on a user's free-text documents (`envs/flow/freetext.py` through `Roles` with
relational=False): the verifier stops when the last document answers the asked relation after
every hop, the generator answers the span asked for, the executor reads the next named title."""

from practicum.envs.flow.freetext import read_question
from practicum.envs.flow.memory import Memory, Step
from practicum.envs.flow.parsing import Plan
from practicum.envs.flow.roles import Roles, RoleSpecs
from practicum.envs.flow.tools import Search, TitleLookup
from practicum.envs.flow.user_data import DocCorpus

DOCS = DocCorpus(
    {
        "Brisk Mill": "The Brisk Mill is a water mill in the town of Dova, built in 1790.",
        "Dova": "Dova is a market town on the river Pell. It was founded in 1402 by the weaver "
        "Ansel Hart. Its mayor is Rita Cole.",
        "Ansel Hart": "Ansel Hart was a weaver born in 1370 in Kessel. He founded Dova.",
        "Pell": "The Pell is a river of the north. It empties into the Narrow Sea. It is 80 "
        "kilometres long.",
        "Kessel": "Kessel is a village in the hills, famous for its wool. Its mayor is Ona Brill.",
    }
)
RULES = RoleSpecs("rules", "rules", "rules", "rules")


def roles() -> Roles:
    return Roles(None, RULES, DOCS.titles, relational=False)


def read(question: str, *titles: str) -> tuple[Memory, list[str]]:
    """Memory after looking up `titles` in order, and the rules verdict after each lookup."""
    memory, r, lookup = Memory(question), roles(), TitleLookup(DOCS)
    verdicts = []
    for title in titles:
        out = lookup.run(title)
        memory.add(Step("lookup", f"Look up {title}.", title, out.text, out.error, out.value))
        verdicts.append(r.verdict(memory, "")[0])
    return memory, verdicts


def test_the_verifier_stops_once_the_last_document_answers_the_asked_relation():
    _, verdicts = read("Who founded the town where the Brisk Mill stands?", "Brisk Mill", "Dova")
    assert verdicts == ["CONTINUE", "STOP"]
    _, verdicts = read("How long is the river that flows through Dova?", "Dova", "Pell")
    assert verdicts == ["CONTINUE", "STOP"]


def test_the_verifier_waits_for_every_hop_the_question_chains():
    # Dova's document names a mayor, but this question asks for the mayor of the founder's
    # birthplace: three documents, and Ansel Hart's does not name a mayor either
    _, verdicts = read(
        "Who is the mayor of the birthplace of the founder of Dova?", "Dova", "Ansel Hart", "Kessel"
    )
    assert verdicts == ["CONTINUE", "CONTINUE", "STOP"]


def test_the_question_is_read_for_its_kind_relation_and_hops():
    titles = DOCS.titles
    q = read_question("In what year was the founder of Dova born?", titles)
    assert (q.kind, q.asked, q.hops, q.named) == ("year", ("year", "born"), 2, ("Dova",))
    q = read_question("Who is the mayor of the town where the Brisk Mill stands?", titles)
    assert (q.kind, q.asked, q.hops) == ("name", ("mayor",), 2)  # the mayor is asked, no hop
    q = read_question("What sea does the river of Dova empty into?", titles)
    assert (q.kind, q.asked, q.type_noun, q.hops) == ("name", ("sea", "empty"), "sea", 2)
    q = read_question("How long is Ansel Hart's river?", titles)
    assert (q.kind, q.hops) == ("measure", 2)
    assert read_question("Dova and Kessel.", titles) is None


def test_the_generator_answers_the_span_asked_for_not_the_document():
    r = roles()
    memory, _ = read("Who founded the town where the Brisk Mill stands?", "Brisk Mill", "Dova")
    assert r.answer(memory)[0] == "Ansel Hart"  # not Dova's document, not its mayor
    memory, _ = read("In what year was the founder of Dova born?", "Dova", "Ansel Hart")
    assert r.answer(memory)[0] == "1370"
    memory, _ = read("How long is the river that flows through Dova?", "Dova", "Pell")
    assert r.answer(memory)[0] == "80 kilometres"
    memory, _ = read("What sea does the river that flows through Dova empty into?", "Dova", "Pell")
    assert r.answer(memory)[0] == "Narrow Sea"


def test_a_stray_search_hit_is_not_part_of_the_chain():
    # the search returns Kessel (it has a mayor) beside the chain's first document; Kessel is
    # neither named by the question nor linked to a document read, so it answers nothing
    memory = Memory("Who is the mayor of the town where the Brisk Mill stands?")
    result = "Brisk Mill: " + DOCS.texts["Brisk Mill"] + " | Kessel: " + DOCS.texts["Kessel"]
    memory.add(Step("search", "mayor Brisk Mill", "mayor Brisk Mill", result))
    assert roles().verdict(memory, "")[0] == "CONTINUE"
    assert roles().answer(memory)[0] != "Ona Brill"
    assert Search(DOCS).run("mayor Brisk Mill").text.startswith("Brisk Mill: ")


def test_the_executor_reads_the_named_title_it_has_not_read_yet():
    r = roles()
    memory, _ = read("Who founded the town where the Brisk Mill stands?", "Brisk Mill")
    plan = Plan(
        context="none", sub_goal="Find who founded Dova, where the Brisk Mill is.", tool="lookup"
    )
    assert r.command(memory.query, plan, TitleLookup.meta, memory)[0] == "Dova"
    plan = Plan(
        context="The Brisk Mill is a water mill in the town of Dova.",
        sub_goal="Find the founder.",
        tool="lookup",
    )  # the sub-goal names no title
    assert r.command(memory.query, plan, TitleLookup.meta, memory)[0] == "Dova"
