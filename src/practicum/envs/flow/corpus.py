"""A generated world of invented entities: short documents plus multi-hop questions over them.

No offline package bundles a QA corpus, so one is generated from a seed (same seed, same world):
companies, people, cities and regions with invented names, each described by one short document
of attribute sentences. A question chains 2 or 3 relations ("What is the region of the
headquarters of Velor Works?"), so answering it needs one lookup per hop, the entity of each
hop coming from the previous answer. Nothing is copied from real data.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SYLLABLES = (
    "ka",
    "lo",
    "mir",
    "ven",
    "tor",
    "sa",
    "quel",
    "dra",
    "vik",
    "or",
    "ne",
    "zul",
    "pa",
    "ren",
    "thi",
    "gar",
    "mo",
    "lys",
    "bel",
    "cor",
    "fen",
    "ista",
    "ur",
    "dal",
)
COMPANY_SUFFIXES = ("Works", "Industries", "Labs", "Foundry", "Systems", "Traders")
REGION_SUFFIXES = ("Vale", "Coast", "Highlands", "Basin")

RELATIONS: dict[str, dict[str, str]] = {
    "company": {"founder": "person", "headquarters": "city", "founded": "year"},
    "person": {"birthplace": "city", "employer": "company", "born": "year"},
    "city": {"region": "region", "mayor": "person", "population": "number"},
    "region": {"capital": "city"},
}
"""kind -> relation -> kind of its value."""

SENTENCES = {
    "founder": "Its founder is {v}.",
    "headquarters": "Its headquarters are in {v}.",
    "founded": "It was founded in {v}.",
    "birthplace": "{s} was born in {v}.",
    "employer": "{s} works for {v}.",
    "born": "{s} was born in the year {v}.",
    "region": "{s} lies in the region {v}.",
    "mayor": "The mayor of {s} is {v}.",
    "population": "{s} has a population of {v}.",
    "capital": "The capital of {s} is {v}.",
}
KIND_INTRO = {
    "company": "{s} is a company.",
    "person": "{s} is a person.",
    "city": "{s} is a city.",
    "region": "{s} is a region.",
}


@dataclass
class Entity:
    name: str
    kind: str
    facts: dict[str, str] = field(default_factory=dict)

    def document(self) -> str:
        parts = [KIND_INTRO[self.kind].format(s=self.name)]
        parts += [SENTENCES[r].format(s=self.name, v=v) for r, v in self.facts.items()]
        return " ".join(parts)


@dataclass
class World:
    entities: dict[str, Entity]

    @property
    def titles(self) -> list[str]:
        return list(self.entities)

    def documents(self) -> list[str]:
        return [e.document() for e in self.entities.values()]

    def fact(self, name: str, relation: str) -> str | None:
        e = self.entities.get(name)
        return None if e is None else e.facts.get(relation)


def _name(rng: random.Random, used: set[str], words: int, suffixes: tuple[str, ...] = ()) -> str:
    while True:
        parts = [
            "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            for _ in range(words)
        ]
        if suffixes:
            parts.append(rng.choice(suffixes))
        name = " ".join(parts)
        if name not in used:
            used.add(name)
            return name


def build_world(
    seed: int, companies: int = 40, people: int = 60, cities: int = 30, regions: int = 8
) -> World:
    """A deterministic world: every relation of every entity is filled."""
    rng = random.Random(seed)
    used: set[str] = set()
    ents: dict[str, list[Entity]] = {
        "company": [
            Entity(_name(rng, used, 1, COMPANY_SUFFIXES), "company") for _ in range(companies)
        ],
        "person": [Entity(_name(rng, used, 2), "person") for _ in range(people)],
        "city": [Entity(_name(rng, used, 1), "city") for _ in range(cities)],
        "region": [Entity(_name(rng, used, 1, REGION_SUFFIXES), "region") for _ in range(regions)],
    }
    for kind, rels in RELATIONS.items():
        for e in ents[kind]:
            for rel, value_kind in rels.items():
                if value_kind == "year":
                    e.facts[rel] = str(rng.randint(1850, 2010))
                elif value_kind == "number":
                    e.facts[rel] = str(rng.randint(2, 900) * 1000)
                else:
                    e.facts[rel] = rng.choice(ents[value_kind]).name
    return World({e.name: e for group in ents.values() for e in group})


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    start: str
    relations: tuple[str, ...]
    """Relations in the order they are looked up (innermost first)."""
    chain: tuple[str, ...]
    """The entities visited: start, then each hop's value (the last is the answer)."""


def question_text(start: str, relations: tuple[str, ...]) -> str:
    """'What is the r_k of the ... of the r_1 of START?' (outermost relation first)."""
    inner = start
    for rel in relations:
        inner = f"the {rel} of {inner}"
    return f"What is {inner}?"


def make_questions(
    world: World, n: int, seed: int, hops: tuple[int, ...] = (2, 3)
) -> list[Question]:
    """`n` distinct multi-hop questions whose chains exist in `world` (deterministic in seed).
    A chain ends at any relation; intermediate values are entities, never years/numbers."""
    rng = random.Random(seed)
    names = sorted(world.entities)
    out: dict[str, Question] = {}
    attempts = 0
    while len(out) < n and attempts < 100 * n:
        attempts += 1
        start = rng.choice(names)
        k = rng.choice(hops)
        chain, rels = [start], []
        for _ in range(k):
            e = world.entities.get(chain[-1])
            if e is None:
                break
            rel = rng.choice(sorted(e.facts))
            rels.append(rel)
            chain.append(e.facts[rel])
        if len(rels) != k or len(set(chain)) != len(chain):
            continue
        q = Question(question_text(start, tuple(rels)), chain[-1], start, tuple(rels), tuple(chain))
        out.setdefault(q.question, q)
    return list(out.values())
