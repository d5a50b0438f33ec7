"""Issue texts of synthesized tasks, from templates by difficulty tier (or by a frozen model).

    tier 1  names the function and file, shows a failing test and its assertion
    tier 2  names failing tests and their error messages, not the function
    tier 3  the symptom only: which behaviour is wrong, one failing test id, nothing else

A model can rewrite the tier's facts into a user-style report (`model_issue`), through the model
service (`practicum.engine.service`); the template text is the fallback when it says nothing
usable. The mutation record itself (mutator, line) never reaches the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_BLOCK_LINES = 14


@dataclass(frozen=True)
class Facts:
    """What an issue may say about one synthesized bug."""

    package: str
    file: str
    function: str
    failing: tuple[str, ...]
    """FAIL_TO_PASS test ids."""
    messages: dict[str, str]
    """Test id -> one-line error from the summary (may be empty)."""
    block: str
    """Traceback excerpt of the first failing test (the 'E' lines and the failing line)."""


def failure_block(log: str, test_id: str) -> str:
    """The short traceback of `test_id` from a pytest log's FAILURES section (or '')."""
    name = test_id.split("::", 1)[-1].replace("::", ".")
    lines = log.splitlines()
    header = re.compile(r"^_{3,} (.+?) _{3,}$")
    for i, line in enumerate(lines):
        m = header.match(line)
        if m and m.group(1) == name:
            block = []
            for nxt in lines[i + 1 :]:
                if header.match(nxt) or nxt.startswith("=" * 5):
                    break
                block.append(nxt)
            keep = [b for b in block if b.startswith("E ") or b.lstrip().startswith(">")]
            if not keep:
                keep = block[-MAX_BLOCK_LINES:]
            return "\n".join(keep[:MAX_BLOCK_LINES])
    return ""


def summary_messages(log: str, ids: tuple[str, ...]) -> dict[str, str]:
    """Test id -> the message after ' - ' on its FAILED/ERROR summary line."""
    out = {}
    for line in log.splitlines():
        for t in ids:
            for status in ("FAILED ", "ERROR "):
                if line.startswith(status + t + " - "):
                    out[t] = line[len(status + t + " - ") :][:300]
    return out


def _bullets(ids, limit=5) -> str:
    shown = "\n".join(f"- `{t}`" for t in ids[:limit])
    more = f"\n- ... and {len(ids) - limit} more" if len(ids) > limit else ""
    return shown + more


def template_issue(facts: Facts, tier: int) -> str:
    """The issue text of a tier (1 most explicit, 3 symptom only)."""
    n = len(facts.failing)
    first = facts.failing[0]
    if tier <= 1:
        block = f"\n\n```\n{facts.block}\n```" if facts.block else ""
        return (
            f"`{facts.function}` in `{facts.file}` gives wrong results.\n\n"
            f"`{first}` fails{block}\n\n"
            f"{n} test{'s fail' if n > 1 else ' fails'} in total:\n{_bullets(facts.failing)}\n\n"
            f"Fix `{facts.function}` so that these tests pass without breaking the others."
        )
    if tier == 2:
        lines = [f"- `{t}`: {facts.messages.get(t, 'fails')}" for t in facts.failing[:3]]
        more = f"\n- ... and {n - 3} more" if n > 3 else ""
        return (
            f"Something in {facts.package} is broken: {n} test{'s' if n > 1 else ''} of its "
            f"own suite fail.\n\n"
            + "\n".join(lines)
            + more
            + "\n\nFind the cause in the package's source and fix it."
        )
    return (
        f"A user of {facts.package} reports wrong behaviour; the test `{first}` fails on the "
        f"current code. Find and fix the bug in the package's source (not in the tests)."
    )


ISSUE_PROMPT = (
    "Write a short GitHub issue (under 120 words) for the Python package {package}, as a user "
    "who hit the bug described below. Describe the symptom and how to reproduce it. Do not "
    "suggest a fix, do not quote these instructions.\n\n{facts}"
)


def model_issue(facts: Facts, tier: int, complete) -> str:
    """An issue written by a frozen model: `complete(messages) -> str` (e.g. a closure over
    `ModelService.complete`). Falls back to the template when the reply is empty or short."""
    base = template_issue(facts, tier)
    try:
        reply = complete(
            [{"role": "user", "content": ISSUE_PROMPT.format(package=facts.package, facts=base)}]
        )
    except Exception:  # noqa: BLE001 - any model failure falls back to the template
        return base
    reply = (reply or "").strip()
    if len(reply) < 40:
        return base
    # the failing test id must stay findable whatever the model wrote
    return reply + f"\n\nFailing test: `{facts.failing[0]}`"
