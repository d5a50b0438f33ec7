"""The "lines" protocol of the LLM instrumenter: the model names line numbers, code inserts.

Rewriting a whole script (the paper's protocol, `instrument._PROMPT`) costs a token per two
characters of script, and a small model rarely copies the script unchanged. Here the model
sees the script with line numbers and answers one short line per milestone,
`milestone: N` ("reached right after line N"); `insert_markers` puts each marker print after
the simple statement that ends on line N, with its indentation. The result is the script plus
prints by construction; `instrument` still checks it like any rewrite, and the judge still
asks for evidence after each marker (`evidence`), so a wrong line number costs that milestone,
never credits a step that did not happen.
"""

from __future__ import annotations

import ast
import re

from practicum.envs.mle.credit.milestones import MILESTONES, marker_line
from practicum.pyast import parse as ast_parse

PROMPT = """Here is a Python script with line numbers.

{numbered}

For each milestone below, find the line after which the script has reached it:
{milestones}

Reply with one line per milestone the script reaches, in the form `milestone: line number`, \
for example `data_loaded: 7`. Leave out milestones it never reaches. Write nothing else."""

_ANSWER = re.compile(r"\b([a-z_]+)\b\W{0,3}\s*(?:line\s*)?(\d+)", re.I)


def prompt(code: str) -> str:
    lines = code.rstrip("\n").splitlines()
    width = len(str(len(lines)))
    numbered = "\n".join(f"{i:>{width}}| {line}" for i, line in enumerate(lines, start=1))
    milestones = "\n".join(f"- {name}: {where}" for name, where in MILESTONES.items())
    return PROMPT.format(numbered=numbered, milestones=milestones)


_EXAMPLE_SCRIPT = """\
import pandas as pd
from sklearn.linear_model import Ridge

df = pd.read_csv("train.csv")
X = df[["a", "b"]]
reg = Ridge()
reg.fit(X, df["y"])
"""
EXAMPLE = (
    prompt(_EXAMPLE_SCRIPT),
    "libraries_imported: 2\ndata_loaded: 4\nfeatures_prepared: 5\nmodel_built: 6\nmodel_trained: 7",
)
"""One worked exchange (prompt, answer), shown to the model as a chat turn before the real
prompt: small models copy a format from an example far better than from a description."""


def parse_answer(text: str) -> dict[str, int]:
    """milestone -> line number from the model's answer (first mention of each counts)."""
    found: dict[str, int] = {}
    for name, number in _ANSWER.findall(text):
        name = name.lower()
        if name in MILESTONES and name not in found:
            found[name] = int(number)
    return found


def _statements_ending_on(tree: ast.Module, number: int) -> list[ast.stmt]:
    """Simple statements (no body of their own) that end on line `number`, innermost last."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.stmt)
            and node.end_lineno == number
            and not hasattr(node, "body")
            and not hasattr(node, "cases")
        ):
            out.append(node)
    return sorted(out, key=lambda s: s.col_offset)


def insert_markers(code: str, nonce: str, answer: dict[str, int]) -> str:
    """The script with a marker print after the statement ending on each answered line.

    A line where no simple statement ends (a blank line, a `def` header, the middle of a
    statement), a line shared with another statement (`a = 1; b = 2`) and a `return`,
    `raise`, `break` or `continue` (a print after it never runs) get no marker.
    """
    tree = ast_parse(code)
    lines = code.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    after: dict[int, list[str]] = {}
    for milestone in MILESTONES:  # pipeline order, so prints on one line stay in order
        number = answer.get(milestone)
        if number is None or not 1 <= number <= len(lines):
            continue
        statements = _statements_ending_on(tree, number)
        if not statements:
            continue
        stmt = statements[-1]
        if isinstance(stmt, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            continue
        first = lines[stmt.lineno - 1]
        indent = first.encode()[: stmt.col_offset].decode(errors="replace")
        if indent.strip() or len(statements) > 1:
            continue  # shares its line with another statement
        after.setdefault(number, []).append(indent + marker_line(nonce, milestone))
    out: list[str] = []
    for number, text in enumerate(lines, start=1):
        out.append(text)
        out.extend(f"{line}\n" for line in after.get(number, []))
    return "".join(out)
