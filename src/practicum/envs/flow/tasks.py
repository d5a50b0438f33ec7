"""The flow's task families, their held-out splits and their exact answer checks.

    multihop    questions over the generated corpus (`corpus.py`), 2-3 lookups each
    arithmetic  reasoning-gym basic_arithmetic
    gsm         reasoning-gym gsm_symbolic (grade-school word problems)
    countdown   reasoning-gym countdown (reach a target with given numbers)

Multihop tasks carry `hops`: per hop of the chain, the strings one tool result must hold
together to show that hop was looked up (`hop_fraction`, the per-hop partial credit).

Checks: multihop = normalised exact match; arithmetic and gsm = a single number (a list of
candidates scores 0) equal to the gold under math-verify; countdown = reasoning-gym's scorer
at full marks (the expression must use the given numbers and reach the target).
"""

from __future__ import annotations

import logging
import random
import re

import reasoning_gym

from practicum.envs.base import Task
from practicum.envs.flow.corpus import World, make_questions
from practicum.tasks.arithmetic import gym_entries

FAMILIES = ("multihop", "arithmetic", "gsm", "countdown")
GYM_NAMES = {"arithmetic": "basic_arithmetic", "gsm": "gsm_symbolic", "countdown": "countdown"}
_NUMBER = re.compile(r"-?\d[\d,]*(\.\d+)?(/\d+)?")
logging.getLogger("math_verify").setLevel(logging.ERROR)


def family_tasks(family: str, n: int, seed: int, split: str, world: World) -> list[Task]:
    """`n` tasks of one family; `split` picks a disjoint seed."""
    split_seed = seed if split == "train" else seed + 1_000_003
    if family == "multihop":
        qs = make_questions(world, n, split_seed * 7 + 1)
        return [
            Task(
                f"{split}/multihop/{i}",
                {
                    "family": "multihop",
                    "split": split,
                    "question": q.question,
                    "answer": q.answer,
                    "chain": list(q.chain),
                    "relations": list(q.relations),
                    "hops": chain_hops(q.chain),
                },
            )
            for i, q in enumerate(qs)
        ]
    entries = gym_entries(GYM_NAMES[family], n, split_seed * 101 + FAMILIES.index(family))
    return [
        Task(
            f"{split}/{family}/{i}",
            {
                "family": family,
                "split": split,
                "question": e["question"],
                "answer": str(e["answer"]),
                "entry": e,
            },
        )
        for i, e in enumerate(entries)
    ]


def split_tasks(
    families: dict[str, float], train_size: int, eval_per_family: int, seed: int, world: World
) -> tuple[list[Task], list[Task]]:
    """Weighted training tasks (shuffled) and `eval_per_family` held-out tasks per family;
    a held-out question also in training is dropped."""
    total = sum(families.values())
    train: list[Task] = []
    for fam, w in sorted(families.items()):
        if w > 0:
            train += family_tasks(fam, max(1, round(train_size * w / total)), seed, "train", world)
    random.Random(seed).shuffle(train)
    seen = {t.data["question"] for t in train}
    per_family = []
    for fam in sorted(f for f, w in families.items() if w > 0):
        cands = family_tasks(fam, eval_per_family * 2, seed, "eval", world)
        per_family.append([t for t in cands if t.data["question"] not in seen][:eval_per_family])
    held = [t for group in zip(*per_family) for t in group]  # interleaved: any prefix is mixed
    return train[:train_size], held


def normalise_text(s: str) -> str:
    s = s.lower().strip()
    s = re.sub(r"[^\w\s]", " ", s)
    s = re.sub(r"\b(the|a|an)\b", " ", s)
    return " ".join(s.split())


def _number_equal(answer: str, gold: str) -> bool:
    from math_verify import parse, verify

    a = answer.strip().rstrip(".").replace(",", "")
    if not _NUMBER.fullmatch(a):
        return False
    g = gold.strip().replace(",", "")
    try:
        if float(eval_fraction(a)) == float(eval_fraction(g)):
            return True
    except ValueError:
        pass
    return bool(
        verify(parse(g, parsing_timeout=None), parse(a, parsing_timeout=None), timeout_seconds=None)
    )


def eval_fraction(s: str) -> float:
    if "/" in s:
        num, den = s.split("/", 1)
        return float(num) / float(den)
    return float(s)


def check_answer(task: Task, answer: str) -> bool:
    """Whether `answer` (one line) solves `task` exactly (module doc)."""
    fam, gold = task.data["family"], task.data["answer"]
    answer = answer.strip()
    if not answer or "\n" in answer:
        return False
    if fam == "multihop":
        return normalise_text(answer) == normalise_text(gold)
    if fam in ("arithmetic", "gsm"):
        return _number_equal(answer, gold)
    entry = task.data["entry"]
    fn = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])
    try:
        return float(fn(answer, entry)) >= 1.0
    except Exception:  # the scorer rejects unparsable answers by raising
        return False


def chain_hops(chain: list[str] | tuple[str, ...]) -> list[list[str]]:
    """Hop i of a generated chain is shown by one result naming both its entity and its value
    (the lookup sentence, or the entity's document: every document states its own facts)."""
    return [[chain[i], chain[i + 1]] for i in range(len(chain) - 1)]


def hop_fraction(hops: list[list[str]], results: list[str]) -> float:
    """The fraction of `hops` shown by some successful tool result. A result is split into its
    documents (search joins them with ' | '), so two documents returned together never make
    one hop's evidence; each hop counts once, however often it is looked up."""
    if not hops:
        return 0.0
    pieces = [f" {normalise_text(p)} " for r in results for p in r.split(" | ")]
    shown = sum(
        any(all(f" {normalise_text(e)} " in p for e in hop) for p in pieces) for hop in hops
    )
    return shown / len(hops)
