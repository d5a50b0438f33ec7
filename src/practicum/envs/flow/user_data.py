"""Search tasks from a user's own files (HotpotQA-style) instead of the generated world.

    questions  JSONL, one object per line: {"question": str, "answer": str,
               "chain": [title, ...] (optional: the documents a solution reads, in order),
               "id": str (optional), "split": "train" | "eval" (optional)}
    corpus     a folder of .txt/.md files (title = file name without suffix, text = content),
               or a JSONL file of {"title": str, "text": str}

A question's `chain` becomes its hops (`tasks.hop_fraction`): hop i is looked up once a
successful tool result holds document i, seen by its opening ("Title: first words", how search
and lookup return a document), so a document that merely names title i earns nothing. Questions
without a chain earn exact-match reward only. Questions without `split` are split by the run
seed. Any problem with a file is a one-line `ConfigError` naming the file and line.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from practicum.envs.base import Task
from practicum.errors import ConfigError


@dataclass
class DocCorpus:
    """Documents by title; stands in for `corpus.World` in the search and lookup tools."""

    texts: dict[str, str]

    @property
    def titles(self) -> list[str]:
        return list(self.texts)

    def documents(self) -> list[str]:
        """Each document led by its title, so a search result names what it found."""
        return [f"{t}: {x}" for t, x in self.texts.items()]

    def opening(self, title: str, words: int = 4) -> str:
        """How a tool result holding the document begins: its title and first words."""
        return f"{title}: " + " ".join(self.texts[title].split()[:words])


def _jsonl(path: Path, what: str) -> list[tuple[int, dict]]:
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} {str(path)!r}: cannot read ({type(e).__name__})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{what} {str(path)}:{i}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{what} {str(path)}:{i}: expected a JSON object")
        rows.append((i, row))
    if not rows:
        raise ConfigError(f"{what} {str(path)!r} holds no rows")
    return rows


def _text(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key!r} must be a non-empty string")
    return value.strip()


def load_corpus(path: str) -> DocCorpus:
    """A folder of text files or a JSONL file of {title, text} (module doc)."""
    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".txt", ".md") and f.is_file())
        if not files:
            raise ConfigError(f"corpus folder {str(p)!r} has no .txt or .md files")
        texts = {}
        for f in files:
            try:
                body = f.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(
                    f"corpus file {str(f)!r}: cannot read ({type(e).__name__})"
                ) from None
            if body:
                texts[f.stem] = " ".join(body.split())
        if not texts:
            raise ConfigError(f"corpus folder {str(p)!r}: every file is empty")
        return DocCorpus(texts)
    if not p.is_file():
        raise ConfigError(f"corpus {str(p)!r} is neither a folder nor a JSONL file")
    texts = {}
    for i, row in _jsonl(p, "corpus"):
        where = f"corpus {str(p)}:{i}"
        title = _text(row, "title", where)
        if title in texts:
            raise ConfigError(f"{where}: title {title!r} appears twice")
        texts[title] = " ".join(_text(row, "text", where).split())
    return DocCorpus(texts)


def load_questions(
    path: str, corpus: DocCorpus, eval_size: int, seed: int
) -> tuple[list[Task], list[Task]]:
    """(training tasks, held-out tasks): rows with a `split` keep it; the rest are shuffled by
    `seed` and `eval_size` of them are held out (fewer when rows with split=eval exist)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"questions file {str(p)!r} not found")
    known = set(corpus.texts)
    fixed: dict[str, list[Task]] = {"train": [], "eval": []}
    free: list[Task] = []
    for i, row in _jsonl(p, "questions"):
        where = f"questions {str(p)}:{i}"
        question, answer = _text(row, "question", where), _text(row, "answer", where)
        chain = row.get("chain") or []
        if not isinstance(chain, list) or not all(isinstance(c, str) for c in chain):
            raise ConfigError(f"{where}: 'chain' must be a list of document titles")
        missing = [c for c in chain if c not in known]
        if missing:
            raise ConfigError(f"{where}: chain title {missing[0]!r} is not in the corpus")
        split = row.get("split")
        if split not in (None, "train", "eval"):
            raise ConfigError(f"{where}: 'split' must be 'train' or 'eval', not {split!r}")
        data = {
            "family": "multihop",
            "question": question,
            "answer": answer,
            "chain": chain,
            "hops": [[corpus.opening(c)] for c in chain],
            "source": str(p),
        }
        task = Task(str(row.get("id", f"user/{i}")), data)
        (fixed[split] if split else free).append(task)
    random.Random(seed).shuffle(free)
    n_eval = max(0, eval_size - len(fixed["eval"]))
    held, train = fixed["eval"] + free[:n_eval], fixed["train"] + free[n_eval:]
    if not train:
        raise ConfigError(
            f"questions {str(p)!r}: no training questions left after holding out {len(held)}"
        )
    for split, tasks in (("train", train), ("eval", held)):
        for t in tasks:
            t.data["split"] = split
            t.task_id = f"{split}/{t.task_id}"
    return train, held
