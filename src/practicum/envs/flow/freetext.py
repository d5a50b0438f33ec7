"""Rules for questions over a user's free-text documents, where a tool result is a document
("Title: text"), not a relation's value.

A question is read shallowly, as a rules baseline can ("In what year was the founder of Dova
born?"):
  kind     what the answer is, from the wh-phrase: a year (when, what year), a measure (how
           long, how deep: a number and its unit), a count (how many) or a name (who, where,
           which town, what is the capital of ...)
  asked    the words of the outer clause, the relation asked about: the wh-phrase's noun
           ("year"), the main verb ("Who founded ...": founded), the last word of an inverted
           question ("... was X born?": born), the head of "Who/What is the N of" (mayor),
           the measure of "how long" (long)
  hops     documents a solution reads: one for the entity the question names, plus one per
           description of an unnamed entity on the way ("the founder", "the town where ...",
           "X's birthplace"); "Who is the mayor of ..." asks for the mayor, so that description
           is no hop
The documents read form the chain when they name each other: each title is so many links from
the titles the question names (`chain_distances`); a search's stray hit is on no chain. An
answer is a span of a document on the chain: the candidate of the asked kind (names: a corpus
title or a capitalised run; years; numbers) in the sentence that names the asked relation,
nearest after its word; never the document's own title, a title the question names, nor one
upstream on the chain (those lead to the answer, they are not it).

What this cannot read (a model in the roles can): yes/no and comparison questions, answers that
are not a span of a document (a description, a paraphrase), a relation worded differently in
the question and the document ("born" vs "native of"), and long documents (results are cut to
`tools.MAX_RESULT_CHARS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from practicum.envs.flow.tools import mentioned_titles

STOPWORDS = frozenset(
    "a an the of in on at to into from for by with and or is was are were be been does did do "
    "has had have which what who whom whose where when how that this it its he she his her "
    "they their there as out about than then".split()
)
AUXILIARIES = frozenset("is was are were does did do has had".split())
PARTICLES = frozenset("into from to in at on of with for".split())
"""Trailing words of a verb (\"empty into\") skipped when looking for it."""
NUMBER_NOUNS = frozenset("population length height depth area age number size".split())
LEADING_FUNCTION_WORDS = frozenset(
    "The A An It Its He She His Her They Their This That These Those There Today In On At Each "
    "Every Since After Before When While".split()
)
_WH = re.compile(
    r"^\s*(?:(?:in|from|out of|to|at|on|for|by|of|through|into|under)\s+)?"
    r"(?:(which|what)\s+([a-z]+)\b|(who|whom|when|where|how\s+[a-z]+|what|which)\b)",
    re.I,
)
_CAP_RUN = re.compile(r"[A-Z][\w'-]*(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][\w'-]*)*")
_YEAR = re.compile(r"(?<!\d)(1\d{3}|20\d{2})(?!\d)")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s+([a-z]+))?")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def same_word(a: str, b: str) -> bool:
    """A crude stem match: equal, or sharing their first five letters (founded ~ founder,
    governs ~ governor, empties ~ empty)."""
    if a == b:
        return True
    if a.endswith("ies") and b.endswith("y"):
        return a[:-3] == b[:-1]
    if b.endswith("ies") and a.endswith("y"):
        return b[:-3] == a[:-1]
    return len(a) >= 5 and len(b) >= 5 and a[:5] == b[:5]


@dataclass(frozen=True)
class Reading:
    kind: str
    """'year' | 'measure' | 'count' | 'name'."""
    asked: tuple[str, ...]
    type_noun: str | None
    """The wh-phrase's noun ("which river" -> river): a name next to it is of the asked kind."""
    hops: int
    named: tuple[str, ...]
    """Corpus titles the question names."""


def read_question(question: str, titles: list[str]) -> Reading | None:
    """The shallow reading of the module doc; None for a text that is not a wh-question."""
    q = question.strip().rstrip("?").strip()
    m = _WH.match(q)
    if not m:
        return None
    wh = (m.group(1) or m.group(3)).lower()
    noun = m.group(2).lower() if m.group(2) else None
    rest = q[m.end() :]
    if noun in AUXILIARIES:  # "What is the ...": a bare wh-word
        noun, rest = None, q[m.start(2) :]
    toks = rest.split()
    low = [t.lower() for t in toks]
    kind = "name"
    asked = [noun] if noun else []
    if wh.startswith("how "):  # "how long ... is it": long is asked; "how many ships": ships
        kind = "count" if wh.split()[1] in ("many", "much") else "measure"
        asked.append(low[0] if kind == "count" and low else wh.split()[1])
    elif wh == "when" or noun == "year":
        kind = "year"
    elif noun in NUMBER_NOUNS:
        kind = "count"
    head = None
    if low and low[0] in AUXILIARIES:
        bare = noun is None and wh in ("who", "whom", "what", "which")
        if bare and len(low) >= 3 and low[1] == "the" and toks[2].islower():
            head = low[2]  # "Who is the mayor of ...": the mayor is asked, not a hop
            asked.append(head)
            kind = "count" if head in NUMBER_NOUNS else kind
        else:  # "In which town was X born", "What sea does X empty into": the outer verb last
            tail = [t for t in toks if t.lower() not in PARTICLES] or toks
            if tail[-1].isalpha() and tail[-1].islower() and tail[-1] not in STOPWORDS:
                asked.append(tail[-1])
    elif low and low[0].isalpha() and low[0] not in STOPWORDS:
        asked.append(low[0])  # "Who founded ...", "Which river flows through ..."
    descriptions = len(re.findall(r"\bthe\s+[a-z]", rest)) + len(re.findall(r"\w's\s+[a-z]", rest))
    hops = 1 + max(0, descriptions - (head is not None))
    return Reading(
        kind, tuple(dict.fromkeys(asked)), noun, hops, tuple(mentioned_titles(question, titles))
    )


def documents(result: str, titles: list[str]) -> list[tuple[str, str]]:
    """(title, text) of each document a tool result holds ("Title: text", joined by ' | ')."""
    known = set(titles)
    out = []
    for piece in result.split(" | "):
        title, sep, text = piece.partition(": ")
        if sep and title in known:
            out.append((title, text))
    return out


def sentences(text: str) -> list[str]:
    """`text` split after . ! ? before a capital (abbreviations may split a sentence)."""
    return [s for s in _SENTENCE.split(text) if s.strip()]


def _candidates(sentence: str, kind: str, titles: list[str]) -> list[tuple[str, int, int]]:
    """(span, start, end) of each answer-like span of `kind` in `sentence` (character offsets)."""
    out = []
    if kind == "year":
        return [(m.group(1), m.start(1), m.end(1)) for m in _YEAR.finditer(sentence)]
    if kind in ("measure", "count"):
        for m in _NUMBER.finditer(sentence):
            unit = m.group(1)
            span = (
                m.group(0)
                if kind == "measure" and unit and unit not in STOPWORDS
                else (m.group(0).split()[0])
            )
            out.append((span, m.start(), m.start() + len(span)))
        return out
    taken: list[tuple[int, int]] = []
    low = sentence.lower()
    for t in sorted(mentioned_titles(sentence, titles), key=len, reverse=True):
        for m in re.finditer(rf"(?<!\w){re.escape(t.lower())}(?!\w)", low):
            if not any(a <= m.start() < b for a, b in taken):
                out.append((t, m.start(), m.end()))
                taken.append((m.start(), m.end()))
    for m in _CAP_RUN.finditer(sentence):
        span, start = m.group(0), m.start()
        first = span.split()[0]
        if first in LEADING_FUNCTION_WORDS:
            span = span[len(first) :].lstrip()
            start = m.end() - len(span)
            if span.lower().startswith("the "):
                span, start = span[4:], start + 4
        if not span or any(a < m.end() and start < b for a, b in taken):
            continue
        out.append((span, start, start + len(span)))
    return out


@dataclass(frozen=True)
class Candidate:
    span: str
    support: int
    """Asked words its sentence names, one more when the wh-noun stands just before the span
    ("which river": "the river Sella")."""
    distance: int
    """Characters from the nearest asked word before the span (one after it costs 40 more)."""

    @property
    def key(self) -> tuple[int, int]:
        return self.support, -self.distance


def best_candidate(
    q: Reading, docs: list[tuple[str, str]], excluded: set[str], titles: list[str]
) -> Candidate | None:
    """The answer span the documents give (module doc), None when they hold none of the kind."""
    skip = {e.lower() for e in excluded} | {t.lower() for t in q.named}
    best: Candidate | None = None
    for title, text in docs:
        for sentence in sentences(text):
            low = sentence.lower()
            positions = [(m.start(), m.group(0)) for m in re.finditer(r"[a-z0-9]+", low)]
            hits = [p for p, w in positions if any(same_word(w, a) for a in q.asked)]
            named = len({a for a in q.asked if any(same_word(w, a) for _, w in positions)})
            for span, start, end in _candidates(sentence, q.kind, titles):
                if span.lower() in skip or span.lower() == title.lower():
                    continue
                typed = bool(
                    q.type_noun and re.search(rf"\b{q.type_noun}", low[max(0, start - 20) : end])
                )
                dist = min((start - h if h <= start else h - end + 40 for h in hits), default=1000)
                cand = Candidate(span, named + typed, dist)
                if best is None or cand.key > best.key:
                    best = cand
    return best


def titles_read(steps, titles: list[str]) -> list[str]:
    """Titles of the documents successful steps returned, in the order first read."""
    seen: dict[str, None] = {}
    for s in steps:
        if not s.error:
            for title, _ in documents(s.result, titles):
                seen.setdefault(title)
    return list(seen)


def chain_distances(steps, question: str, titles: list[str]) -> dict[str, int]:
    """Links from the question to each title, over the documents successful steps returned:
    a document links to every title it names, both ways ("Ostmark ... Its capital is Ostry"
    links Ostmark to Ostry). The titles the question names are 0 away (without one, the first
    document read is); a document read but not reached is a stray search hit, not the chain."""
    mentions: dict[str, set[str]] = {}
    for s in steps:
        if not s.error:
            for title, text in documents(s.result, titles):
                mentions.setdefault(title, set(mentioned_titles(text, titles)) - {title})
    anchors = mentioned_titles(question, titles) or list(mentions)[:1]
    neighbours: dict[str, set[str]] = {}
    for title, named in mentions.items():
        for other in named:
            neighbours.setdefault(title, set()).add(other)
            neighbours.setdefault(other, set()).add(title)
    dist = {a: 0 for a in anchors}
    frontier = list(anchors)
    while frontier:
        nxt = []
        for title in frontier:
            for other in sorted(neighbours.get(title, ())):
                if other not in dist:
                    dist[other] = dist[title] + 1
                    nxt.append(other)
        frontier = nxt
    return dist


def _answer_in(
    q: Reading, docs: list[tuple[str, str]], dist: dict[str, int], titles: list[str]
) -> Candidate | None:
    """The best span of the documents on the chain, none upstream of its own document."""
    best = None
    for title, text in docs:
        if title not in dist:
            continue
        upstream = {t for t, d in dist.items() if d < dist[title]}
        cand = best_candidate(q, [(title, text)], upstream, titles)
        if cand is not None and (best is None or cand.key > best.key):
            best = cand
    return best


def answer_from(steps, question: str, titles: list[str]) -> Candidate | None:
    """The answer the documents of `steps` on the chain give: from the latest step whose
    documents name the asked relation, else the latest step's best span of the asked kind."""
    q = read_question(question, titles)
    if q is None:
        return None
    dist = chain_distances(steps, question, titles)
    fallback = None
    for step in reversed([s for s in steps if not s.error]):
        cand = _answer_in(q, documents(step.result, titles), dist, titles)
        if cand is not None and cand.support > 0:
            return cand
        fallback = fallback or cand
    return fallback


def answers_question(steps, question: str, titles: list[str]) -> bool:
    """The rules verifier on documents: the last step returned a document of the chain, at
    least as many links from the question as it chains hops (so the first document never ends
    it early), that names the asked relation with a span of the asked kind."""
    last = steps[-1] if steps else None
    q = read_question(question, titles)
    if last is None or last.error or q is None:
        return False
    dist = chain_distances(steps, question, titles)
    docs = [(t, x) for t, x in documents(last.result, titles) if dist.get(t, -1) >= q.hops - 1]
    cand = _answer_in(q, docs, dist, titles)
    return cand is not None and cand.support > 0
