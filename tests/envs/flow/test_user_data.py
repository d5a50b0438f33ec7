"""Search tasks from a user's own files: a HotpotQA-style corpus (folder or JSONL) and
questions JSONL with answers and hop chains; one-line errors for bad files; the planner's
demonstrations written from the user's own training questions."""

import json
from pathlib import Path

import pytest

from practicum.envs.flow.memory import Memory, Step
from practicum.envs.flow.prompts import planner_messages
from practicum.envs.flow.roles import Roles
from practicum.envs.flow.tasks import hop_fraction
from practicum.envs.flow.tools import TitleLookup
from practicum.envs.flow.user_data import load_corpus, load_questions
from practicum.envs.registry import SuiteContext, build_suite
from practicum.errors import ConfigError
from tests.envs.flow.test_demo import act_out

RULES = {"analyst": "rules", "executor": "rules", "verifier": "rules", "generator": "rules"}
DOCS = {
    "Arthur's Magazine": "Arthur's Magazine was an American literary periodical first "
    "published in 1844 in Philadelphia.",
    "Philadelphia": "Philadelphia is a city in Pennsylvania, founded by William Penn.",
    "William Penn": "William Penn was an English writer born in London.",
    "First for Women": "First for Women is a woman's magazine published in the USA.",
}
QUESTIONS = [
    {
        "question": "Who founded the city where Arthur's Magazine was published?",
        "answer": "William Penn",
        "chain": ["Arthur's Magazine", "Philadelphia"],
        "id": "q1",
    },
    {
        "question": "Where was the founder of Philadelphia born?",
        "answer": "London",
        "chain": ["Philadelphia", "William Penn"],
        "split": "eval",
    },
    {"question": "In which country is First for Women published?", "answer": "USA"},
    {
        "question": "Which magazine started first, Arthur's Magazine or First for Women?",
        "answer": "Arthur's Magazine",
        "chain": ["Arthur's Magazine", "First for Women"],
    },
]


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.fixture
def files(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for title, text in DOCS.items():
        (folder / f"{title}.txt").write_text(text)
    corpus = write_jsonl(
        tmp_path / "corpus.jsonl", [{"title": t, "text": x} for t, x in DOCS.items()]
    )
    return {
        "folder": str(folder),
        "jsonl": corpus,
        "questions": write_jsonl(tmp_path / "q.jsonl", QUESTIONS),
        "tmp": tmp_path,
    }


@pytest.mark.parametrize("kind", ["folder", "jsonl"])
def test_a_corpus_loads_from_a_folder_or_jsonl(files, kind):
    c = load_corpus(files[kind])
    assert c.texts == DOCS
    assert (
        "Philadelphia: Philadelphia is a city in Pennsylvania, founded by William Penn."
        in c.documents()
    )  # each document led by its title


def test_questions_keep_their_split_and_chain_and_the_rest_split_by_seed(files):
    c = load_corpus(files["jsonl"])
    train, held = load_questions(files["questions"], c, eval_size=2, seed=0)
    assert len(train) == 2 and len(held) == 2
    assert any(t.data["answer"] == "London" for t in held)  # split: eval kept
    q1 = next(t for t in train + held if t.task_id.endswith("q1"))
    assert q1.data["hops"] == [
        ["Arthur's Magazine: Arthur's Magazine was an"],
        ["Philadelphia: Philadelphia is a city"],
    ]
    assert all(t.data["family"] == "multihop" for t in train + held)
    assert load_questions(files["questions"], c, 2, 0)[0][0].task_id == train[0].task_id


def test_a_document_naming_the_next_title_is_not_that_hop(files):
    c = load_corpus(files["jsonl"])
    train, held = load_questions(files["questions"], c, eval_size=2, seed=0)
    q1 = next(t for t in train + held if t.task_id.endswith("q1"))
    first = TitleLookup(c).run("Arthur's Magazine").text  # "... published in Philadelphia."
    assert "Philadelphia" in first
    assert hop_fraction(q1.data["hops"], [first]) == 0.5
    assert hop_fraction(q1.data["hops"], [first, TitleLookup(c).run("Philadelphia").text]) == 1


class Generator(Roles):
    reply = ""

    def answer(self, memory):
        return self.reply, self.reply


def test_the_suite_searches_the_users_documents_and_credits_their_chain(files):
    suite = build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1},
            "eval_per_family": 1,
            "questions": files["questions"],
            "corpus": files["folder"],
            "tools": ["search", "lookup"],
        },
        SuiteContext(0),
    )
    assert not any("Velor" in t.data["question"] for t in suite.train_tasks)
    task = next(t for t in suite.train_tasks + suite.eval_tasks if t.task_id.endswith("q1"))
    env = suite.make_env(None)
    roles = Generator(None, env.roles.specs, env.roles.titles, relational=False)
    roles.reply, env.roles = "William Penn", roles
    env.reset(task)
    r = env.step("Context: none\nSub-Goal: Arthur's Magazine\nTool Name: lookup")
    assert r.info["flow"]["result"].startswith("Arthur's Magazine: Arthur's Magazine was")
    r = env.step(
        "Context: published in Philadelphia\nSub-Goal: who founded Philadelphia\nTool Name: search"
    )
    assert "Philadelphia: " in r.info["flow"]["result"]
    r = r if r.done else env.step("Context: none\nSub-Goal: done\nTool Name: search")
    assert r.done and r.solved and r.metrics["hops/multihop"] == 1.0 and r.reward == 1.5
    env.close()
    # the same looked-up documents with a wrong answer: hop credit only, below any solve
    env = suite.make_env(None)
    roles.reply, env.roles = "Benjamin Franklin", roles
    env.reset(task)
    for sub in ("Arthur's Magazine", "Philadelphia", "Philadelphia"):
        r = env.step(f"Context: none\nSub-Goal: {sub}\nTool Name: lookup")
    assert r.done and not r.solved and r.reward == 0.5
    env.close()


def test_mixed_with_generated_families(files):
    suite = build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1, "arithmetic": 1},
            "train_size": 10,
            "eval_per_family": 2,
            "questions": files["questions"],
            "corpus": files["jsonl"],
        },
        SuiteContext(0),
    )
    fams = [t.data["family"] for t in suite.train_tasks]
    assert fams.count("multihop") == 2 and fams.count("arithmetic") >= 5
    assert [t.data["family"] for t in suite.eval_tasks][:2] == ["multihop", "arithmetic"]


def bad(files, name, text):
    p = files["tmp"] / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "case, message",
    [
        ("not_json", r"questions .*q_bad.jsonl:2: not JSON"),
        ("no_answer", r"questions .*:1: 'answer' must be a non-empty string"),
        ("unknown_title", r"chain title 'Nowhere' is not in the corpus"),
        ("bad_split", r"'split' must be 'train' or 'eval'"),
        ("missing", r"questions file .* not found"),
        ("corpus_dup", r"corpus .*:2: title 'A' appears twice"),
        ("corpus_empty_dir", r"corpus folder .* has no .txt or .md files"),
        ("only_eval", r"no training questions left"),
    ],
)
def test_bad_files_are_one_line_config_errors(files, case, message):
    q, c = files["questions"], files["jsonl"]
    good = json.dumps(QUESTIONS[0])
    if case == "not_json":
        q = bad(files, "q_bad.jsonl", good + "\n{oops\n")
    elif case == "no_answer":
        q = bad(files, "q_bad.jsonl", json.dumps({"question": "x"}))
    elif case == "unknown_title":
        q = bad(files, "q_bad.jsonl", json.dumps({**QUESTIONS[0], "chain": ["Nowhere"]}))
    elif case == "bad_split":
        q = bad(files, "q_bad.jsonl", json.dumps({**QUESTIONS[0], "split": "test"}))
    elif case == "missing":
        q = str(files["tmp"] / "absent.jsonl")
    elif case == "corpus_dup":
        c = bad(files, "c_bad.jsonl", '{"title": "A", "text": "a"}\n{"title": "A", "text": "b"}')
    elif case == "corpus_empty_dir":
        (files["tmp"] / "empty").mkdir()
        c = str(files["tmp"] / "empty")
    elif case == "only_eval":
        q = bad(files, "q_bad.jsonl", json.dumps({**QUESTIONS[0], "split": "eval"}))
    with pytest.raises(ConfigError, match=message) as e:
        build_suite(
            "flow",
            {**RULES, "families": {"multihop": 1}, "questions": q, "corpus": c},
            SuiteContext(0),
        )
    assert "\n" not in str(e.value)


def test_questions_and_corpus_go_together(files):
    with pytest.raises(ConfigError, match="questions and corpus go together"):
        build_suite("flow", {**RULES, "questions": files["questions"]}, SuiteContext(0))


def test_the_demonstrations_are_drawn_from_the_users_own_questions(files):
    suite = build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1},
            "eval_per_family": 1,
            "questions": files["questions"],
            "corpus": files["folder"],
            "tools": ["search", "lookup"],
        },
        SuiteContext(0),
    )
    task = next(t for t in suite.train_tasks if t.task_id.endswith("q1"))
    act = suite.demonstrator(task.task_id)
    memory = Memory(task.data["question"])
    first = act(planner_messages(memory, "", 1, 3, [], documents=True))
    assert first == (
        "Context: none\nSub-Goal: Who founded the city where Arthur's Magazine "
        "was published?\nTool Name: search"
    )
    # a search that found the chain's first document only: look up the next, quoting the
    # sentence that names it (cut to what the plan grammar's cap holds)
    memory.add(
        Step(
            "search",
            "q",
            "q",
            "First for Women: First for Women is a woman's "
            "magazine. | Arthur's Magazine: " + DOCS["Arthur's Magazine"],
        )
    )
    second = act(planner_messages(memory, "", 2, 3, [], documents=True))
    assert second == (
        "Context: was an American literary periodical first published in 1844 "
        "in Philadelphia\n"
        "Sub-Goal: Look up Philadelphia.\nTool Name: lookup"
    )
    result, replies = act_out(suite, task)  # through the real tools and rules roles
    assert result.solved and result.metrics["hops/multihop"] == 1.0 and replies[0] == first


def test_the_example_search_set_is_solved_by_its_own_demonstrations():
    """examples/flow_search: each training question's scripted plan, run through the real
    tools and rules roles, is graded solved (a search may find the answer's document without
    the chain's first)."""
    root = Path(__file__).resolve().parents[3] / "examples" / "flow_search"
    suite = build_suite(
        "flow",
        {
            **RULES,
            "families": {"multihop": 1},
            "eval_per_family": 14,
            "max_steps_train": 4,
            "tools": ["search", "lookup"],
            "questions": str(root / "questions.jsonl"),
            "corpus": str(root / "docs"),
        },
        SuiteContext(0),
    )
    assert (len(suite.train_tasks), len(suite.eval_tasks)) == (14, 14)
    for task in suite.train_tasks:
        result, replies = act_out(suite, task)
        assert result.solved and result.metrics["hops/multihop"] >= 0.5, replies
        assert task.data["question"] in replies[0] and "search" in replies[0]
