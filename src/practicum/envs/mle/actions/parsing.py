"""Parsing the policy's reply into code: script mode and the fenced-block helpers.

Script mode (arXiv 2509.01684): a short natural-language plan, then exactly one ```python block
that writes submission.csv. Template mode (`template`) builds on `extract_code`.

Every failure raises `ActionParseError` whose message is short enough to show the model as
its observation.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from practicum.pyast import parse as ast_parse

_PY_TAGS = {"python", "python3", "py", "py3"}
_OPEN = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*([\w+.-]*)[ \t]*$")


class ActionParseError(ValueError):
    """The reply cannot be turned into code; `str(err)` is the observation for the model."""


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a reply."""

    lang: str
    """Lowercased info string after the opening fence ("" when untagged)."""
    code: str
    """Block content, dedented."""
    start: int
    """Offset in the reply where the opening fence begins."""
    closed: bool
    """False when the reply ended inside the block (generation cut off)."""


@dataclass(frozen=True)
class ScriptAction:
    """A parsed script-mode reply."""

    plan: str
    """Text before the code block, stripped (may be empty)."""
    code: str
    """The Python source to run."""


def code_blocks(reply: str) -> list[CodeBlock]:
    """All fenced blocks of `reply`, in order (``` fences, optional language tag)."""
    blocks: list[CodeBlock] = []
    lines = reply.replace("\r\n", "\n").split("\n")
    offset, i = 0, 0
    offsets = []
    for line in lines:
        offsets.append(offset)
        offset += len(line) + 1
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.group(1), opening.group(2).lower()
        body: list[str] = []
        closed = False
        j = i + 1
        while j < len(lines):
            line = lines[j]
            bare = line.strip()
            if bare and set(bare) == {"`"} and len(bare) >= len(fence):
                closed = True
                break
            if bare.endswith(fence) and not bare.startswith("`"):
                body.append(line.rstrip()[: -len(fence)])  # `print(x)```: fence glued to code
                closed = True
                break
            body.append(line)
            j += 1
        blocks.append(
            CodeBlock(lang, textwrap.dedent("\n".join(body)).strip("\n"), offsets[i], closed)
        )
        i = j + 1
    return blocks


def syntax_problem(code: str) -> str | None:
    """None when `code` parses, else a one-line description of the first syntax error."""
    try:
        ast_parse(code)
    except SyntaxError as err:
        return f"SyntaxError line {err.lineno}: {err.msg}"
    except ValueError as err:  # e.g. null bytes
        return f"ValueError: {err}"
    return None


def _python_block(reply: str) -> CodeBlock:
    """The single Python block of a reply (tagged python, or untagged and parsing)."""
    blocks = code_blocks(reply)
    unclosed = [b for b in blocks if not b.closed and (b.lang in _PY_TAGS or not b.lang)]
    tagged = [b for b in blocks if b.lang in _PY_TAGS]
    if not tagged:
        untagged = [b for b in blocks if not b.lang]
        parsing = [b for b in untagged if syntax_problem(b.code) is None]
        tagged = parsing if len(untagged) > 1 and parsing else untagged
    if not tagged:
        raise ActionParseError("no ```python code block found")
    if len(tagged) > 1:
        raise ActionParseError(f"{len(tagged)} code blocks found; send exactly one")
    block = tagged[0]
    if block in unclosed:
        raise ActionParseError("the ```python block is not closed with ``` (reply cut off?)")
    if not block.code.strip():
        raise ActionParseError("the code block is empty")
    return block


def parse_script_action(reply: str) -> ScriptAction:
    """Split a script-mode reply into plan and code; the code must parse."""
    block = _python_block(reply)
    problem = syntax_problem(block.code)
    if problem:
        raise ActionParseError(f"code does not parse: {problem}")
    plan = reply.replace("\r\n", "\n")[: block.start].strip()
    return ScriptAction(plan=plan, code=block.code + "\n")


def extract_code(reply: str) -> str:
    """The code of a reply: its single Python block, or the whole reply when it is bare Python."""
    if "```" not in reply:
        bare = textwrap.dedent(reply.replace("\r\n", "\n")).strip("\n")
        if not bare.strip():
            raise ActionParseError("the reply is empty")
        problem = syntax_problem(bare)
        if problem:
            raise ActionParseError(
                f"no ```python code block found and the reply does not parse: {problem}"
            )
        return bare
    code = _python_block(reply).code
    problem = syntax_problem(code)
    if problem:
        raise ActionParseError(f"code does not parse: {problem}")
    return code
