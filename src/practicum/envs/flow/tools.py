"""The flow's offline tools, each with the metadata the planner and executor are shown.

    tool.run(command) -> ToolResult(text, error, value, seconds)

Each is a `practicum.tools.Tool`; `build_tools` gathers the episode's into a `ToolSet`. A command
a tool rejects outright (an empty program, words given to the calculator) fails in its `parse`.

python_coder and calculator run model-written code in the sandbox (`practicum.envs.sandbox`);
search (BM25 via bm25s) and lookup read the generated corpus (`corpus.World`) in this process,
no code involved. `value` is the short answer-like part of a result (a number, an attribute
value), used by the rules generator and verifier; `text` is what memory records.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

import bm25s

from practicum.envs.calculator import calculator_program
from practicum.envs.flow.corpus import RELATIONS, World
from practicum.envs.flow.user_data import DocCorpus
from practicum.envs.sandbox import Limits, run_python
from practicum.tools import CallError, Tool, ToolResult, ToolSet

logging.getLogger("bm25s").setLevel(logging.WARNING)

MAX_RESULT_CHARS = 300
"""Results are truncated before they enter memory (as the paper's executor does)."""


@dataclass(frozen=True)
class ToolMeta:
    name: str
    description: str
    input_schema: str
    limitations: str
    example: str

    def card(self) -> str:
        return (
            f"- {self.name}: {self.description} Input: {self.input_schema}. "
            f"Limits: {self.limitations} E.g. {self.example}"
        )


class FlowTool(Tool):
    """A tool with the card the planner and executor are shown."""

    meta: ToolMeta


def _sandbox_output(program: str, workdir: Path, limits: Limits) -> ToolResult:
    res = run_python(program, workdir, limits)
    if res.timed_out:
        return ToolResult("Error: timed out", True, seconds=res.duration)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["failed"])[-1]
        return ToolResult(f"Error: {last[:200]}", True, seconds=res.duration)
    out = res.stdout.strip()
    if not out:
        return ToolResult("Error: nothing printed", True, seconds=res.duration)
    lines = out.splitlines()
    return ToolResult(out[:MAX_RESULT_CHARS], False, lines[-1].strip()[:100], res.duration)


class Calculator(FlowTool):
    name = "calculator"
    meta = ToolMeta(
        "calculator",
        "evaluates one arithmetic expression.",
        "an expression",
        "numbers and + - * / ( ) only.",
        "calculator: (12 + 30) * 2",
    )

    def __init__(self, workdir: Path, limits: Limits):
        self.workdir, self.limits = workdir, limits

    def parse(self, command: str) -> str:
        expr = command.strip().strip("`").strip()
        if not expr:
            raise CallError("Error: empty expression")
        if re.search(r"[A-Za-z_]", expr):
            raise CallError("Error: the calculator takes numbers and operators only")
        return expr

    def execute(self, expr: str) -> ToolResult:
        return _sandbox_output(calculator_program(expr), self.workdir, self.limits)


class PythonCoder(FlowTool):
    name = "python_coder"
    meta = ToolMeta(
        "python_coder",
        "runs a short Python program and returns what it prints.",
        "Python code that prints its result",
        "sandboxed, a few seconds, no network.",
        "python_coder: print(sum(range(10)))",
    )

    def __init__(self, workdir: Path, limits: Limits):
        self.workdir, self.limits = workdir, limits

    def parse(self, command: str) -> str:
        code = command.strip()
        fence = re.search(r"```(?:python)?\n?(.*?)(?:```|$)", code, re.S)
        code = fence.group(1) if fence else code
        if not code.strip():
            raise CallError("Error: empty program")
        if "print" not in code:  # a bare expression: print its value
            code = calculator_program(code)
        return code

    def execute(self, code: str) -> ToolResult:
        return _sandbox_output(code, self.workdir, self.limits)


class Search(FlowTool):
    name = "search"
    meta = ToolMeta(
        "search",
        "BM25 keyword search over the encyclopedia (companies, people, cities, regions).",
        "keywords",
        "returns the top 2 documents.",
        "search: founder of Velor Works",
    )

    def __init__(self, world: World | DocCorpus, k: int = 2):
        self.world, self.k = world, k
        self.docs = world.documents()
        if isinstance(world, DocCorpus):
            self.meta = ToolMeta(
                "search",
                "BM25 keyword search over the documents.",
                "keywords",
                "returns the top 2 documents, each led by its title.",
                "search: who directed the film",
            )
        self.retriever = bm25s.BM25()
        self.retriever.index(
            bm25s.tokenize(self.docs, stopwords="en", show_progress=False), show_progress=False
        )

    def top(self, query: str, k: int) -> list[int]:
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens or not tokens[0]:
            return []
        docs, scores = self.retriever.retrieve(
            tokens, k=min(k, len(self.docs)), show_progress=False
        )
        return [int(d) for d, s in zip(docs[0], scores[0]) if s > 0]

    def execute(self, command: str) -> ToolResult:
        start = time.perf_counter()
        hits = self.top(command, self.k)
        if not hits:
            return ToolResult(
                "Error: no document matches", True, seconds=time.perf_counter() - start
            )
        text = " | ".join(self.docs[i] for i in hits)
        return ToolResult(text[:MAX_RESULT_CHARS], False, "", time.perf_counter() - start)


ALL_RELATIONS = sorted({r for rels in RELATIONS.values() for r in rels})
RELATION_WORDS = {r: (r,) for r in ALL_RELATIONS} | {
    "founder": ("founder", "founded by", "who founded"),
    "birthplace": ("birthplace", "born in which", "where was", "city of birth"),
    "headquarters": ("headquarters", "headquartered", "based"),
    "employer": ("employer", "works for", "work for"),
    "founded": ("founded in", "year founded", "founding year"),
    "born": ("born", "year of birth", "birth year"),
}
"""Words naming each relation (the lookup tool accepts any of them)."""


def find_entity(text: str, titles: list[str]) -> str | None:
    """The longest corpus title mentioned in `text` (case-insensitive), else None."""
    low = text.lower()
    found = [t for t in titles if t.lower() in low]
    return max(found, key=len) if found else None


def mentioned_titles(text: str, titles: list[str]) -> list[str]:
    """Titles named in `text` (case-insensitive, whole words), without those only seen inside
    a longer named title ("Velor" inside "Velor Works")."""
    low = text.lower()
    spans: dict[str, list[tuple[int, int]]] = {}
    for t in titles:
        found = [
            (m.start(), m.end()) for m in re.finditer(rf"(?<!\w){re.escape(t.lower())}(?!\w)", low)
        ]
        if found:
            spans[t] = found
    longer = sorted(spans, key=len, reverse=True)
    keep = []
    for t in spans:
        covered = [(a, b) for u in longer if len(u) > len(t) for a, b in spans[u]]
        if any(not any(a <= s and e <= b for a, b in covered) for s, e in spans[t]):
            keep.append(t)
    return keep


def find_relation(text: str, entity: str | None = None) -> str | None:
    """The relation named in `text`; with several, the one nearest before `entity`'s mention
    ("the birthplace of the founder of X" -> founder)."""
    low = text.lower()
    if low.strip(" .?'\"") in RELATION_WORDS:  # exactly a relation's name
        return low.strip(" .?'\"")
    anchor = low.find(entity.lower()) if entity and entity.lower() in low else len(low)
    best, best_pos = None, -1
    for rel, words in RELATION_WORDS.items():
        for w in words:
            for m in re.finditer(re.escape(w), low):
                pos = m.start()
                if pos <= anchor and pos > best_pos:
                    best, best_pos = rel, pos
    if best is None:  # only mentioned after the entity ("X's founder", "X founder")
        for rel, words in RELATION_WORDS.items():
            if any(w in low for w in words):
                return rel
    return best


class Lookup(FlowTool):
    name = "lookup"
    meta = ToolMeta(
        "lookup",
        "gives one attribute of one entity of the encyclopedia.",
        "'ENTITY | ATTRIBUTE', ATTRIBUTE one of " + ", ".join(ALL_RELATIONS),
        "exact entity name; one attribute per call.",
        "lookup: Velor Works | founder",
    )

    def __init__(self, world: World):
        self.world = world
        self.titles = world.titles

    def execute(self, command: str) -> ToolResult:
        start = time.perf_counter()
        head, _, tail = command.partition("|")
        entity = find_entity(head, self.titles) or find_entity(command, self.titles)
        if entity is None:
            return ToolResult(
                "Error: no entity of that name", True, seconds=time.perf_counter() - start
            )
        relation = find_relation(tail or command, entity if not tail else None)
        if relation is None:
            doc = self.world.entities[entity].document()
            return ToolResult(
                f"Error: name an attribute. {doc}"[:MAX_RESULT_CHARS],
                True,
                seconds=time.perf_counter() - start,
            )
        value = self.world.fact(entity, relation)
        if value is None:
            kind = self.world.entities[entity].kind
            return ToolResult(
                f"Error: a {kind} has no {relation} (it has {', '.join(RELATIONS[kind])})",
                True,
                seconds=time.perf_counter() - start,
            )
        return ToolResult(
            f"The {relation} of {entity} is {value}.", False, value, time.perf_counter() - start
        )


class TitleLookup(FlowTool):
    """`lookup` over a user's document corpus: the document of one named title."""

    name = "lookup"
    meta = ToolMeta(
        "lookup",
        "gives the document of one title.",
        "'TITLE'",
        "exact title; one document per call.",
        "lookup: Velor Works",
    )

    def __init__(self, corpus: DocCorpus):
        self.corpus = corpus

    def execute(self, command: str) -> ToolResult:
        start = time.perf_counter()
        title = find_entity(command.partition("|")[0], self.corpus.titles) or find_entity(
            command, self.corpus.titles
        )
        if title is None:
            return ToolResult(
                "Error: no document of that title", True, seconds=time.perf_counter() - start
            )
        text = f"{title}: {self.corpus.texts[title]}"[:MAX_RESULT_CHARS]
        return ToolResult(text, False, "", time.perf_counter() - start)


def build_tools(
    names: list[str],
    world: World | DocCorpus,
    workdir: Path,
    limits: Limits,
    search: Search | None = None,
) -> ToolSet[FlowTool]:
    """The named tools (an unknown name is a config error caught by the options model)."""
    lookup = (
        (lambda: TitleLookup(world)) if isinstance(world, DocCorpus) else (lambda: Lookup(world))
    )
    make = {
        "python_coder": lambda: PythonCoder(workdir, limits),
        "calculator": lambda: Calculator(workdir, limits),
        "search": lambda: search or Search(world),
        "lookup": lookup,
    }
    return ToolSet(make[n]() for n in names)


TOOL_NAMES = ("python_coder", "calculator", "search", "lookup")
