"""Scripted planner demonstrations: the data of `practicum sft`'s warm start for AgentFlow.

A 135M planner copies the query into every Sub-Goal and so looks up hop 1 again and again; RL
alone rarely samples a plan that names the next hop's entity (what hop credit would reward).
As for SWE (`envs.swe.demo`), a script writes plans for TRAINING tasks from their own data, in
the planner's reply format:

    multihop    step i: "Find the <relation i> of <entity i>." with tool lookup, the entity
                being the one the previous lookup returned (the task's chain), and the
                previous step's result as Context
    arithmetic  "Compute <the question's expression>." with tool calculator, when the
                expression fits the plan grammar's token cap
    your own    (`task.options.questions` with a `chain` of document titles) step 1: the
    questions   question itself with tool search (BM25 often returns the chain's documents);
                then "Look up <title>." with tool lookup for the chain's first title not read
                yet, the Context the sentence of a document read that names it (what a planner
                reads to choose it), each field cut to the plan grammar's caps

Other families (and user questions without a chain) get no script: their actor asks a search
for "the answer", which the environment does not grade solved, so SFT keeps none.
`Demonstrator` knows only the tasks it is given (the training split); it writes plans only:
the real executor, tools and verifier run them and the exact-match check grades the answer.
"""

from __future__ import annotations

import re

from practicum.envs.base import Message, Task
from practicum.envs.flow.freetext import sentences
from practicum.envs.flow.roles import longest_expression

RELATION_NOUNS = {"founded": "founding year", "born": "birth year"}
"""Relations whose name is not a noun ("the founded of X" reads badly; the lookup accepts both)."""
CONTEXT_CHARS = 90
"""Longest Context copied from memory (the plan grammar caps the field)."""
EXPRESSION_TOKENS = 18
"""Longest expression scripted: the plan grammar caps a Sub-Goal at `planner_grammar_tokens`
(24 by default) and SmolLM2 spends a token per digit, so a longer one is not demonstrated (the
policy could not write it under the grammar either)."""


def rough_tokens(text: str) -> int:
    """An upper estimate of a tokenizer's count for arithmetic: one per digit and per run of
    other non-space characters."""
    return len(re.findall(r"\d|[^\d\s]+", text))


def rough_prose_tokens(text: str) -> int:
    """A tokenizer's count for prose, about: one per 4 letters, per digit and per other
    non-space character (invented names and years tokenise densely)."""
    return len(re.findall(r"[A-Za-z]{1,4}|\d|[^\sA-Za-z\d]", text))


def plan(sub_goal: str, tool: str, context: str = "none") -> str:
    return f"Context: {context}\nSub-Goal: {sub_goal}\nTool Name: {tool}"


def results_so_far(messages: list[Message]) -> list[str]:
    """Every step's result in the planner's prompt (its last user message), in order."""
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return re.findall(r"^\s*Result: (.*)$", last, re.M)


def steps_done(messages: list[Message]) -> tuple[int, str]:
    """(planner steps already in memory, the last step's result) from the planner's prompt."""
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    results = results_so_far(messages)
    return len(re.findall(r"^Action Step \d+:", last, re.M)), (results[-1] if results else "")


def hop_plan(task: Task, step: int, previous: str) -> str:
    """The honest plan of hop `step` of a multihop task (the last hop again past the chain)."""
    relations, chain = task.data["relations"], task.data["chain"]
    i = min(step, len(relations) - 1)
    relation = RELATION_NOUNS.get(relations[i], relations[i])
    context = previous if previous and len(previous) <= CONTEXT_CHARS else "none"
    return plan(f"Find the {relation} of {chain[i]}.", "lookup", context)


def fits(text: str, tokens: int, chars: int) -> bool:
    return len(text) <= chars and rough_prose_tokens(text) <= tokens


def clip(text: str, tokens: int, chars: int) -> str:
    """`text` cut after its last whole word that keeps it within the caps."""
    words = text.split()
    while len(words) > 1 and not fits(" ".join(words), tokens, chars):
        words.pop()
    return " ".join(words)


def bridge_sentence(results: list[str], title: str, tokens: int, chars: int) -> str:
    """The sentence of a document in `results` (latest first) that names `title`, other than
    its own; when over the caps, its clause naming it, else the words ending at the title;
    "none" without one."""
    for result in reversed(results):
        for piece in result.split(" | "):
            own, _, text = piece.partition(": ")
            if own == title:
                continue
            low = title.lower()
            for sentence in sentences(text or piece):
                if low not in sentence.lower():
                    continue
                clauses = [
                    sentence,
                    *(c for c in re.split(r", |; | and ", sentence) if low in c.lower()),
                ]
                fitting = [c for c in clauses if fits(c, tokens, chars)]
                if fitting:
                    return fitting[0]
                words = clauses[-1][: clauses[-1].lower().find(low) + len(title)].split()
                while len(words) > 1 and not fits(" ".join(words), tokens, chars):
                    words.pop(0)
                return " ".join(words)
    return "none"


def document_plan(task: Task, results: list[str], tokens: int, chars: int) -> str:
    """The plan of the next step of a question over the user's documents (module doc)."""
    chain = task.data["chain"]
    if not results:
        return plan(clip(task.data["question"], tokens, chars), "search")
    read = {
        t for r in results for piece in r.split(" | ") for t in chain if piece.startswith(f"{t}: ")
    }
    title = next((t for t in chain if t not in read), chain[-1])
    return plan(f"Look up {title}.", "lookup", bridge_sentence(results, title, tokens, chars))


class Demonstrator:
    """Writes the planner's replies for the training tasks it was given."""

    def __init__(self, tasks: list[Task], field_tokens: int = 24, field_chars: int = 100):
        self.tasks = {t.task_id: t for t in tasks}
        self.field_tokens, self.field_chars = field_tokens, field_chars
        """The plan grammar's caps on Context and Sub-Goal (`planner_grammar_*`)."""

    def __call__(self, task_id: str):
        if task_id not in self.tasks:
            raise KeyError(f"no demonstration for {task_id!r}: not a training task")
        task = self.tasks[task_id]
        family = task.data.get("family")

        def act(messages: list[Message]) -> str:
            step, previous = steps_done(messages)
            if family == "multihop" and task.data.get("relations"):
                return hop_plan(task, step, previous)
            if family == "multihop" and task.data.get("chain"):  # the user's own questions
                return document_plan(
                    task, results_so_far(messages), self.field_tokens, self.field_chars
                )
            expr = longest_expression(task.data["question"]) if family == "arithmetic" else ""
            if expr and rough_tokens(expr) <= EXPRESSION_TOKENS:
                return plan(f"Compute {expr}.", "calculator")
            return plan("Search for the answer to the query.", "search")

        return act
