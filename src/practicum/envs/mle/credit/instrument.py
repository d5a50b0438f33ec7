"""Inserting milestone prints into the agent's script before it runs (arXiv 2509.01684, Sec. 3.2).

Two instrumenters, one contract: the output is the input plus marker print statements
(`milestones.marker_line`) and nothing else, which `marker_checks.only_prints_added` checks
on the ASTs.
- `LLMInstrumenter`: a frozen model rewrites the script with the given print lines at the
  milestone points, as in the paper (protocol "rewrite"), or names the line after which each
  milestone is reached and code inserts the prints (protocol "lines", `line_markers`: a few
  tokens instead of the whole script). It is a `ModelClient` of the run's model service,
  chosen by the `instrumenter` option: "base" (the policy's frozen base: the live policy with
  its adapter off), "local:<model>", "openai:<base_url>|<model>"; "rules" means no model.
- `rule_instrumenter.rule_instrument`: a deterministic AST-guided inserter, the fallback
  whenever the model's rewrite does not parse, adds no marker, or changes anything but prints.
`instrument` tries the first and falls back to the second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from practicum.envs.mle.actions.parsing import ActionParseError, extract_code
from practicum.envs.mle.credit import line_markers
from practicum.envs.mle.credit.marker_checks import (
    markers_with_nonce,
    only_prints_added,
    unbound_marker_names,
)
from practicum.envs.mle.credit.milestones import MILESTONES, marker_line
from practicum.envs.mle.credit.rule_instrumenter import rule_instrument
from practicum.pyast import parse as ast_parse

if TYPE_CHECKING:
    from practicum.engine.service import Completion, ModelClient


@dataclass(frozen=True)
class InstrumentResult:
    """The code to run and how its markers got there."""

    code: str
    method: Literal["llm", "rules", "none"]
    """Who inserted the markers; "none": nothing inserted (no milestone found, or bad code)."""
    rejected_reason: str | None = None
    """Why the LLM rewrite was not used (None when it was, or when there was no LLM)."""
    llm_seconds: float = 0.0
    """Wall time of the LLM call (0 without one): the instrumenter's cost."""
    llm_tokens: int = 0
    """Tokens the LLM generated (0 without a call, or from an endpoint that reports none)."""


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

    SYSTEM = "You are a careful programmer. You follow instructions exactly."

    LINES_BUDGET = 120
    """Tokens of a "lines" answer: seven `milestone: N` lines are about 60."""

    def __init__(
        self,
        client: ModelClient,
        max_new_tokens: int = 2048,
        max_script_chars: int | None = None,
        protocol: Literal["rewrite", "lines"] = "rewrite",
    ):
        if protocol not in ("rewrite", "lines"):
            raise ValueError(f"protocol must be 'rewrite' or 'lines', got {protocol!r}")
        self.client = client
        self.protocol = protocol
        self.max_new_tokens = max_new_tokens
        """Cap on the rewrite's length in tokens (see `budget`)."""
        self.max_script_chars = max_script_chars
        """Longer scripts are not sent to the model (the rules mark them): a rewrite costs
        about a token per two characters of script. None: no limit."""

    def prompt(self, code: str, nonce: str) -> str:
        if self.protocol == "lines":
            return line_markers.prompt(code)
        lines = []
        for milestone, where in MILESTONES.items():
            value = "SCORE" if milestone == "validation_scored" else None
            lines.append(f"- {where}:\n    {marker_line(nonce, milestone, value)}")
        lines.append("  (replace SCORE by the variable that holds the validation score)")
        return _PROMPT.format(lines="\n".join(lines), code=code.rstrip("\n"))

    def budget(self, code: str) -> int:
        """Tokens the rewrite may take: the script plus seven prints (~40 tokens each) and a
        fence. Python averages 3-4 characters per token (2 at the densest), so len/2 + 400
        leaves an honest rewrite room, and a small model caught in a greedy loop stops soon."""
        if self.protocol == "lines":
            return min(self.max_new_tokens, self.LINES_BUDGET)
        return min(self.max_new_tokens, len(code) // 2 + 400)

    def too_long(self, code: str) -> bool:
        return self.max_script_chars is not None and len(code) > self.max_script_chars

    def ask(self, code: str, nonce: str) -> Completion:
        """The model's raw answer to the instrumentation prompt (greedy, `budget` tokens)."""
        from practicum.engine.base import SamplingParams  # torch: only when a model is used

        example = []
        if self.protocol == "lines":
            example = [
                {"role": "user", "content": line_markers.EXAMPLE[0]},
                {"role": "assistant", "content": line_markers.EXAMPLE[1]},
            ]
        messages = [
            {"role": "system", "content": self.SYSTEM},
            *example,
            {"role": "user", "content": self.prompt(code, nonce)},
        ]
        params = SamplingParams(temperature=0.0, max_new_tokens=self.budget(code))
        return self.client.complete(messages, params)

    def apply(self, code: str, nonce: str, answer: str) -> str:
        """The instrumented script an answer gives (unvalidated). Raises ActionParseError when
        it gives none."""
        if self.protocol == "rewrite":
            return extract_code(answer) + "\n"
        lines = line_markers.parse_answer(answer)
        if not lines:
            raise ActionParseError("no `milestone: line` pair in the answer")
        return line_markers.insert_markers(code, nonce, lines)

    def rewrite(self, code: str, nonce: str) -> str:
        """The model's instrumented script (unvalidated). Raises ActionParseError on no code."""
        return self.apply(code, nonce, self.ask(code, nonce).text)


UNUSABLE = (OSError, ValueError, KeyError, RuntimeError)
"""Errors of the LLM call that make it fall back to the rules: an endpoint down or
timing out (OSError), a malformed response or an over-long prompt (ValueError, KeyError), a
failed generation (RuntimeError). Anything else is a bug and propagates."""


# ------------------------------------------------------------------ entry point


def instrument(code: str, nonce: str, llm: LLMInstrumenter | None = None) -> InstrumentResult:
    """Code with milestone prints for run `nonce`: the LLM's rewrite if valid, else the rules'."""
    try:
        ast_parse(code)
    except (SyntaxError, ValueError):
        return InstrumentResult(code, "none", None)
    reason, seconds, tokens = None, 0.0, 0
    if llm is not None and llm.too_long(code):
        reason = f"script longer than {llm.max_script_chars} characters: not sent to the model"
    elif llm is not None:
        started = time.perf_counter()
        try:
            completion = llm.ask(code, nonce)
            tokens = len(completion.token_ids)
            rewritten = llm.apply(code, nonce, completion.text)
        except ActionParseError as err:
            reason = f"rewrite unusable: {err}"
        except UNUSABLE as err:  # a down or slow instrumenter costs only the LLM path
            reason = f"instrumenter failed: {type(err).__name__}: {err}"
        else:
            if not only_prints_added(code, rewritten):
                reason = "rewrite changes more than marker prints"
            elif markers_with_nonce(rewritten, nonce) <= markers_with_nonce(code, nonce):
                reason = "rewrite adds no marker with this run's nonce"
            elif unknown := unbound_marker_names(code, rewritten):
                reason = f"a marker value reads names the script never binds: {sorted(unknown)}"
            else:
                return InstrumentResult(
                    rewritten, "llm", None, time.perf_counter() - started, tokens
                )
        seconds = time.perf_counter() - started
    try:
        ruled = rule_instrument(code, nonce)
    except (SyntaxError, ValueError, RecursionError, KeyError):
        return InstrumentResult(code, "none", reason, seconds, tokens)
    added = markers_with_nonce(ruled, nonce) - markers_with_nonce(code, nonce)
    if added <= 0 or not only_prints_added(code, ruled):
        return InstrumentResult(code, "none", reason, seconds, tokens)
    return InstrumentResult(ruled, "rules", reason, seconds, tokens)
