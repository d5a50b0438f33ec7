"""The frozen roles (query analyst, executor, verifier, generator, optional judge), each on
the backend its config names through the model service (`policy`, `base` = the policy's
weights with the adapter off, `local:<m>`, `openai:<url>|<m>`) or on `rules` (no model).

The rules are small and transparent, for tests and cheap runs:
  executor   lookup: an entity named in the sub-goal (else the context), preferring the one a
             step produced most recently (then the longest name), and the relation named in
             the sub-goal; calculator/python_coder: the longest arithmetic expression;
             search: the sub-goal as keywords. It never resolves an entity the plan does not
             name: a planner that copies the query looks up hop 1 again, it does not skip
             ahead to the hop memory makes next.
  verifier   STOP after a successful step that answers the query's outermost relation (a
             lookup of it) once memory holds as many distinct successful lookups as the
             query has hops ("the capital of the region of the capital of X" asks three),
             or, for a query without one, a successful numeric result.
  generator  the value of the last successful step.
  analyst    no analysis.

On a user's free-text documents (`relational=False`, `flow.freetext`) a lookup names a title,
and the executor prefers a named title not read yet, then the one a result mentioned most
recently; the verifier stops once as many documents were read as the question chains and the
last one names the asked relation with a span of the asked kind; the generator answers with
that span (a name, a year, a measure), not with the document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from practicum.engine.base import SamplingParams
from practicum.engine.service import ModelClient, ModelService
from practicum.envs.flow import freetext, prompts
from practicum.envs.flow.memory import Memory
from practicum.envs.flow.parsing import Plan, extract_answer, parse_command, parse_verdict
from practicum.envs.flow.tools import RELATION_WORDS, ToolMeta, find_relation, mentioned_titles

_EXPR = re.compile(r"-?[\d(][\d\s+\-*/().^%]*[\d)]")
_LOOKUP_RESULT = re.compile(r"^The (\w+) of .+ is .+\.$")


@dataclass
class RoleSpecs:
    analyst: str = "base"
    executor: str = "base"
    verifier: str = "base"
    generator: str = "base"
    judge: str | None = None


@dataclass
class RoleTokens:
    analyst: int = 64
    executor: int = 48
    verifier: int = 48
    generator: int = 32


def longest_expression(text: str) -> str:
    """The longest arithmetic expression (with an operator) in `text`, else ""."""
    cands = [m.group(0).strip() for m in _EXPR.finditer(text)]
    cands = [c.replace("^", "**") for c in cands if re.search(r"\d\s*[-+*/^%]\s*-?[\d(]", c)]
    return max(cands, key=len) if cands else ""


def asked_relation(query: str) -> str | None:
    """The outermost relation of a corpus question ('What is the X of ...' -> X), else None."""
    m = re.match(r"\s*what is the (.+?) of ", query, re.I)
    if not m:
        return None
    for rel, words in RELATION_WORDS.items():
        if m.group(1).lower() in words or m.group(1).lower() == rel:
            return rel
    return None


def query_hops(query: str) -> int:
    """How many 'the X of' links a corpus question chains (at least 1)."""
    body = re.sub(r"^\s*what is ", "", query, flags=re.I)
    return max(1, len(re.findall(r"\bthe .+? of ", body, re.I)))


class Roles:
    """Calls for every frozen role; `last_calls` records each role's raw output (for show)."""

    def __init__(
        self,
        service: ModelService | None,
        specs: RoleSpecs,
        titles: list[str],
        tokens: RoleTokens | None = None,
        relational: bool = True,
    ):
        self.specs, self.titles, self.tokens = specs, titles, tokens or RoleTokens()
        self.relational = relational
        """False for a user's document corpus: a lookup names a title, no attribute."""
        self._clients: dict[str, ModelClient | None] = {}
        self.service = service

    def _client(self, role: str) -> ModelClient | None:
        spec = getattr(self.specs, role)
        if spec is None or spec == "rules":
            return None
        if role not in self._clients:
            if self.service is None:
                raise RuntimeError(f"role {role} needs a model service (spec {spec!r})")
            self._clients[role] = self.service.client(spec)
        return self._clients[role]

    def _call(self, role: str, messages, max_tokens: int) -> str:
        client = self._client(role)
        return client.complete(
            messages, SamplingParams(temperature=0.0, max_new_tokens=max_tokens)
        ).text

    # -- roles ------------------------------------------------------------------------------------
    def analyse(self, query: str, tools: list[ToolMeta]) -> str:
        if self._client("analyst") is None:
            return ""
        return self._call(
            "analyst", prompts.analyst_messages(query, tools), self.tokens.analyst
        ).strip()

    def command(
        self, query: str, plan: Plan, tool: ToolMeta, memory: Memory | None = None
    ) -> tuple[str, str]:
        """(tool input, the executor's raw reply)."""
        if self._client("executor") is None:
            cmd = self.rules_command(plan, memory)
            return cmd, f"Command: {cmd}"
        raw = self._call(
            "executor", prompts.executor_messages(query, plan, tool), self.tokens.executor
        )
        return parse_command(raw, tool.name), raw

    def verdict(self, memory: Memory, analysis: str) -> tuple[str, str]:
        """('STOP' | 'CONTINUE', the verifier's raw reply)."""
        if self._client("verifier") is None:
            v = self.rules_verdict(memory)
            return v, f"Conclusion: {v}"
        raw = self._call(
            "verifier", prompts.verifier_messages(memory, analysis), self.tokens.verifier
        )
        return parse_verdict(raw), raw

    def answer(self, memory: Memory) -> tuple[str, str]:
        """(final answer, the generator's raw reply)."""
        if self._client("generator") is None:
            ans = self.rules_answer(memory)
            return ans, f"Answer: {ans}"
        raw = self._call("generator", prompts.generator_messages(memory), self.tokens.generator)
        return extract_answer(raw), raw

    def judge(self, query: str, answer: str, gold: str) -> bool:
        """The optional judge's verdict (False without one)."""
        if self.specs.judge is None or self._client("judge") is None:
            return False
        raw = self._call("judge", prompts.judge_messages(query, answer, gold), 4)
        return raw.strip().upper().startswith("YES")

    # -- rules ------------------------------------------------------------------------------------
    def resolve_entity(self, text: str, memory: Memory | None) -> str | None:
        """The title named in `text` that a step of `memory` produced most recently, else the
        longest named title, else None."""
        named = mentioned_titles(text, self.titles)
        if not named:
            return None
        produced = [s.value for s in (memory.steps if memory else []) if not s.error and s.value]
        for value in reversed(produced):
            if value in named:
                return value
        return max(named, key=len)

    def resolve_document(self, text: str, memory: Memory | None) -> str | None:
        """The title named in `text` to read next: one not read yet (else any named), the one
        a result mentioned most recently, else the longest."""
        named = mentioned_titles(text, self.titles)
        if not named:
            return None
        steps = memory.steps if memory else []
        read = set(freetext.titles_read(steps, self.titles))
        fresh = [t for t in named if t not in read] or named
        for s in reversed([s for s in steps if not s.error]):
            seen = [t for t in fresh if t in mentioned_titles(s.result, self.titles)]
            if seen:
                return max(seen, key=len)
        return max(fresh, key=len)

    def rules_command(self, plan: Plan, memory: Memory | None = None) -> str:
        text = plan.sub_goal
        if plan.tool == "lookup" and not self.relational:  # a user's corpus: titles only
            return (
                self.resolve_document(text, memory)
                or self.resolve_document(plan.context, memory)
                or text
            )
        if plan.tool == "lookup":
            entity = self.resolve_entity(text, memory) or self.resolve_entity(plan.context, memory)
            relation = find_relation(text, entity)
            return f"{entity} | {relation}" if entity and relation else text
        if plan.tool in ("calculator", "python_coder"):
            code = re.search(r"```(?:python)?\n?(.*?)```", text, re.S)
            if plan.tool == "python_coder" and code:
                return code.group(1)
            expr = longest_expression(text) or longest_expression(plan.context)
            if not expr:
                return text
            return expr if plan.tool == "calculator" else f"print({expr})"
        return text

    def rules_answer(self, memory: Memory) -> str:
        if not self.relational:
            cand = freetext.answer_from(memory.steps, memory.query, self.titles)
            if cand is not None:
                return cand.span
        done = [s for s in memory.steps if not s.error and s.value]
        return done[-1].value if done else ""

    def rules_verdict(self, memory: Memory) -> str:
        if (
            not self.relational
            and memory.steps
            and freetext.documents(memory.steps[-1].result, self.titles)
        ):
            stop = freetext.answers_question(memory.steps, memory.query, self.titles)
            return "STOP" if stop else "CONTINUE"
        if not memory.steps or memory.steps[-1].error or not memory.steps[-1].value:
            return "CONTINUE"
        last = memory.steps[-1]
        asked = asked_relation(memory.query)
        if asked is None:
            return "STOP" if re.fullmatch(r"-?[\d.,/]+", last.value) else "CONTINUE"
        m = _LOOKUP_RESULT.match(last.result)
        looked_up = {
            s.result for s in memory.steps if not s.error and _LOOKUP_RESULT.match(s.result)
        }
        done = m and m.group(1) == asked and len(looked_up) >= query_hops(memory.query)
        return "STOP" if done else "CONTINUE"
