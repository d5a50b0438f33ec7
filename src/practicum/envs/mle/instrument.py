"""Inserting milestone prints into the agent's script before it runs (arXiv 2509.01684, Sec. 3.2).

Two instrumenters, one contract: the output is the input plus marker print statements
(`milestones.marker_line`) and nothing else, which `marker_checks.only_prints_added` checks
on the ASTs.
- `LLMInstrumenter`: a frozen model (by default the policy's base weights, adapter disabled)
  rewrites the script with the given print lines at the milestone points, as in the paper.
- `instrument_rules.rule_instrument`: a deterministic AST-guided inserter, the fallback
  whenever the model's rewrite does not parse, adds no marker, or changes anything but prints.
`instrument` tries the first and falls back to the second.
"""

from __future__ import annotations

import ast
import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from practicum.envs.mle.actions import ActionParseError, extract_code
from practicum.envs.mle.instrument_rules import rule_instrument
from practicum.envs.mle.marker_checks import (
    markers_with_nonce,
    only_prints_added,
    unbound_marker_names,
)
from practicum.envs.mle.milestones import MILESTONES, marker_line


@dataclass(frozen=True)
class InstrumentResult:
    """The code to run and how its markers got there."""

    code: str
    method: Literal["llm", "rules", "none"]
    """Who inserted the markers; "none": nothing inserted (no milestone found, or bad code)."""
    rejected_reason: str | None = None
    """Why the LLM rewrite was not used (None when it was, or when there was no LLM)."""


# ------------------------------------------------------------------ LLM

_PROMPT = """You add progress prints to a Python script. Do not change anything else.

Insert each line below, unchanged, on its own line right after the statement where the script \
reaches that milestone, with that statement's indentation. Skip milestones the script never \
reaches. Do not add, remove or edit any other code.

{lines}

Reply with the full modified script in one ```python code block and nothing else.

```python
{code}
```"""


class LLMInstrumenter:
    """Asks a frozen model to insert the marker prints (see module docstring)."""

    def __init__(self, complete: Callable[[str], str]):
        self.complete = complete
        """prompt -> reply text of the frozen instrumenter model."""

    def prompt(self, code: str, nonce: str) -> str:
        lines = []
        for milestone, where in MILESTONES.items():
            value = "SCORE" if milestone == "validation_scored" else None
            lines.append(f"- {where}:\n    {marker_line(nonce, milestone, value)}")
        lines.append("  (replace SCORE by the variable that holds the validation score)")
        return _PROMPT.format(lines="\n".join(lines), code=code.rstrip("\n"))

    def rewrite(self, code: str, nonce: str) -> str:
        """The model's instrumented script (unvalidated). Raises ActionParseError on no code."""
        return extract_code(self.complete(self.prompt(code, nonce))) + "\n"


def openai_complete(
    base_url: str,
    model: str,
    api_key: str | None = None,
    max_tokens: int = 4096,
    timeout: float = 300.0,
) -> Callable[[str], str]:
    """A `complete` function for an OpenAI-compatible server (vLLM, llama.cpp, ...), greedy.

    base_url: e.g. "http://localhost:8000/v1" (a missing "/v1" is added).
    """
    url = base_url.rstrip("/")
    url = (url if url.endswith("/v1") else url + "/v1") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def complete(prompt: str) -> str:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())["choices"][0]["message"]["content"] or ""

    return complete


# ------------------------------------------------------------------ entry point


def instrument(code: str, nonce: str, llm: LLMInstrumenter | None = None) -> InstrumentResult:
    """Code with milestone prints for run `nonce`: the LLM's rewrite if valid, else the rules'."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return InstrumentResult(code, "none", None)
    reason = None
    if llm is not None:
        try:
            rewritten = llm.rewrite(code, nonce)
        except ActionParseError as err:
            reason = f"rewrite unusable: {err}"
        except Exception as err:  # a down or slow instrumenter server costs only the LLM path
            reason = f"instrumenter failed: {type(err).__name__}: {err}"
        else:
            if not only_prints_added(code, rewritten):
                reason = "rewrite changes more than marker prints"
            elif markers_with_nonce(rewritten, nonce) <= markers_with_nonce(code, nonce):
                reason = "rewrite adds no marker with this run's nonce"
            elif unknown := unbound_marker_names(code, rewritten):
                reason = f"a marker value reads names the script never binds: {sorted(unknown)}"
            else:
                return InstrumentResult(rewritten, "llm", None)
    try:
        ruled = rule_instrument(code, nonce)
    except (SyntaxError, ValueError, RecursionError, KeyError):
        return InstrumentResult(code, "none", reason)
    added = markers_with_nonce(ruled, nonce) - markers_with_nonce(code, nonce)
    if added <= 0 or not only_prints_added(code, ruled):
        return InstrumentResult(code, "none", reason)
    return InstrumentResult(ruled, "rules", reason)
