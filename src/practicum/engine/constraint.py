"""Grammar-constrained decoding with exact log-probs (llguidance, Lark grammars).

A turn sampled under a grammar is drawn from the masked, renormalised distribution
q(x) = pi(x) 1[x allowed] / Z, not from pi: the sampler masks the logits with the grammar's
allowed set before temperature, so its behaviour log-prob is log q. The learner scores the same
q: it replays the grammar over the sampled ids (a matcher fed the same ids computes the same
masks) and takes the log-softmax over the allowed tokens only, for the policy, the proximal
policy and the KL reference alike. A forced token (the only one allowed) then has log q = 0
and no gradient. Scoring log pi instead would put a factor Z (the allowed mass) into every
token's importance ratio pi / q, far from 1 on tool-call turns.

    grammars = grammars_for(tokenizer)
    m = grammars.matcher(lark)                 # one per sampled row: fill a mask, consume ids
    packed = grammars.replay(lark, ids)        # [len(ids), W] int32: the mask at every position
    table, which = grammars.replay_distinct(lark, ids)  # the same, each distinct mask once
    logits = masked_logits(logits, packed)     # -inf outside the allowed set
    GrammarMasks.from_spans((B, T), spans, W)  # a batch's replays: constrained positions only

Masks are llguidance's packed bitmasks: bit k of int32 word w allows token 32 w + k. When the
grammar is complete only the tokenizer's eos is allowed, so a constrained turn ends by sampling
it (log-prob 0), as vLLM's guidance backend does.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch
from torch import Tensor

from practicum.errors import PracticumError


class GrammarError(PracticumError, ValueError):
    """A grammar that llguidance cannot compile, or sampled ids it does not accept."""


def _short(grammar: str, width: int = 60) -> str:
    flat = " ".join(grammar.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


@functools.lru_cache(maxsize=256)
def compiled(grammar: str) -> str:
    """The llguidance grammar for a Lark grammar; a malformed one raises `GrammarError` in one
    line naming it (syntax only: the tokenizer is not needed for that)."""
    import llguidance

    if not isinstance(grammar, str) or not grammar.strip():
        raise GrammarError(f"grammar error: expected a Lark grammar, got {grammar!r}")
    spec = llguidance.LLMatcher.grammar_from_lark(grammar)
    error = llguidance.LLMatcher.validate_grammar(spec)
    if error:
        first = error.strip().splitlines()[0]
        raise GrammarError(f"grammar error: {first} in grammar {_short(grammar)}")
    return spec


class TokenGrammars:
    """Grammars compiled for one tokenizer: matchers for sampling and replays for learning."""

    replay_cache = 64
    """Replays kept (a training step scores each row several times: proximal, each epoch)."""
    max_templates = 256
    """Compiled matchers kept (environments may build a grammar per task); then started anew."""

    def __init__(self, tokenizer: Any):
        import llguidance
        import llguidance.hf

        self.tokenizer = tokenizer
        self.ll = llguidance.hf.from_tokenizer(tokenizer)
        self.width = (self.ll.vocab_size + 31) // 32
        """Int32 words per packed mask."""
        self._templates: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.replay_distinct = functools.lru_cache(maxsize=self.replay_cache)(self._replay_distinct)

    def matcher(self, grammar: str):
        """A fresh llguidance matcher at the start of `grammar` (a copy of a cached one)."""
        import llguidance

        with self._lock:
            template = self._templates.get(grammar)
            if template is None:
                template = llguidance.LLMatcher(self.ll, compiled(grammar), log_level=0)
                if template.is_error():
                    raise GrammarError(
                        f"grammar error: {template.get_error().splitlines()[0]} "
                        f"in grammar {_short(grammar)}"
                    )
                if len(self._templates) >= self.max_templates:
                    self._templates.clear()
                self._templates[grammar] = template
        return template.deep_copy()

    def fill(self, matchers: list, out: Tensor | None = None) -> Tensor:
        """The next-token mask of each matcher, packed: [len(matchers), W] int32 (CPU). (Written
        straight into `out`'s rows, as llguidance.torch does; that module is not imported
        because it sets up torch.compile, seconds of import.)"""
        if out is None:
            out = torch.empty(len(matchers), self.width, dtype=torch.int32)
        if (
            out.dtype != torch.int32
            or out.device.type != "cpu"
            or not out.is_contiguous()
            or out.shape != (len(matchers), self.width)
        ):
            raise ValueError(
                f"fill: expected a contiguous CPU int32 [{len(matchers)}, {self.width}] tensor"
            )
        row_bytes = self.width * 4
        for i, m in enumerate(matchers):
            m.unsafe_compute_mask_ptr(out.data_ptr() + i * row_bytes, row_bytes)
        return out

    def consume(self, matcher, token: int, grammar: str) -> None:
        """Advance `matcher` by a token that its mask allowed; refuse one it did not."""
        if not matcher.consume_token(token):
            raise GrammarError(
                f"grammar error: token {token} is not allowed by grammar "
                f"{_short(grammar)} ({matcher.get_error().splitlines()[0]})"
            )

    def replay(self, grammar: str, ids: tuple[int, ...]) -> Tensor:
        """The mask each of `ids` was sampled under, packed [len(ids), W] int32 (module doc)."""
        table, which = self.replay_distinct(grammar, ids)
        return table[which]

    def _replay_distinct(self, grammar: str, ids: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """`replay`'s masks as (table [U, W] int32 of the distinct ones, which [len(ids)] int64:
        each position's row), without holding len(ids) x W words at any time."""
        m = self.matcher(grammar)
        scratch = torch.empty(1, self.width, dtype=torch.int32)
        index: dict[bytes, int] = {}
        rows, which = [], []
        for t in ids:
            self.fill([m], scratch)
            key = scratch.numpy().tobytes()
            if key not in index:
                index[key] = len(rows)
                rows.append(scratch[0].clone())
            which.append(index[key])
            self.consume(m, t, grammar)
        table = torch.stack(rows) if rows else torch.zeros(0, self.width, dtype=torch.int32)
        return table, torch.tensor(which, dtype=torch.long)


_GRAMMARS: dict[int, TokenGrammars] = {}
_GRAMMARS_LOCK = threading.Lock()


def grammars_for(tokenizer: Any) -> TokenGrammars:
    """The `TokenGrammars` of this tokenizer object (built once: it reads the whole vocabulary)."""
    with _GRAMMARS_LOCK:
        g = _GRAMMARS.get(id(tokenizer))
        if g is None or g.tokenizer is not tokenizer:
            g = _GRAMMARS[id(tokenizer)] = TokenGrammars(tokenizer)
        return g


def unpack(packed: Tensor, vocab: int) -> Tensor:
    """Packed masks [..., W] int32 -> bool [..., vocab]: bit k of word w is token 32 w + k.
    Tokens past the packed width (a model vocabulary padded beyond the tokenizer's) are
    allowed only where every packed bit is (an unconstrained position)."""
    raw = packed.contiguous().view(torch.uint8)  # little-endian: byte j of word w = bits 8j..
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = ((raw[..., None] >> shifts) & 1).bool().flatten(-2)
    if bits.shape[-1] >= vocab:
        return bits[..., :vocab]
    free = (packed == -1).all(dim=-1, keepdim=True)
    return torch.cat([bits, free.expand(*free.shape[:-1], vocab - bits.shape[-1])], dim=-1)


def masked_logits(logits: Tensor, packed: Tensor) -> Tensor:
    """`logits` [..., V] with -inf on the tokens `packed` [..., W] does not allow."""
    allowed = unpack(packed.to(logits.device), logits.shape[-1])
    return logits.masked_fill(~allowed, float("-inf"))


class GrammarMasks:
    """The packed masks of a [B, T] batch's constrained positions only, each distinct mask once.

    A dense [B, T, W] replay costs 4 W bytes per token, constrained or not (W = vocab / 32 words:
    about 19 kB per token for a 152k vocabulary). Here a position without a grammar costs
    nothing, and a constrained one an index (8 bytes) into a table of its distinct masks (a
    grammar revisits few states: inside a string or a name most positions allow the same set).
    Exact: `at` returns the very words the dense replay holds.

        positions [K] int64, sorted: flat index b * T + t of each constrained position
        which     [K] int64: its row in `table`
        table     [U, W] int32: the distinct packed masks
    """

    def __init__(self, shape: tuple[int, int], positions: Tensor, which: Tensor, table: Tensor):
        self.shape, self.positions, self.which, self.table = shape, positions, which, table

    @classmethod
    def from_spans(
        cls, shape: tuple[int, int], spans: list[tuple[int, int, Tensor, Tensor]], width: int
    ) -> GrammarMasks:
        """From replayed spans (b, start, table [U, W], which [n]: `replay_distinct`'s) of a
        [B, T] batch, spans not overlapping."""
        index: dict[bytes, int] = {}
        rows: list[Tensor] = []
        positions, which = [], []
        for b, start, table, span_which in spans:
            slot = []
            for row in table:
                key = row.numpy().tobytes()
                if key not in index:
                    index[key] = len(rows)
                    rows.append(row)
                slot.append(index[key])
            positions.append(b * shape[1] + start + torch.arange(len(span_which)))
            which.append(torch.tensor(slot, dtype=torch.long)[span_which])
        if not rows:
            return cls(
                shape,
                torch.zeros(0, dtype=torch.long),
                torch.zeros(0, dtype=torch.long),
                torch.zeros(0, width, dtype=torch.int32),
            )
        pos, order = torch.cat(positions).sort()
        return cls(shape, pos, torch.cat(which)[order], torch.stack(rows))

    @classmethod
    def from_dense(cls, dense: Tensor) -> GrammarMasks:
        """From dense [B, T, W] masks (all bits set where unconstrained)."""
        b, t, w = dense.shape
        dense = dense.cpu()
        spans = []
        for i, j in (dense != -1).any(-1).nonzero().tolist():
            spans.append((i, j, dense[i, j : j + 1], torch.zeros(1, dtype=torch.long)))
        return cls.from_spans((b, t), spans, w)

    def at(self, flat: Tensor) -> Tensor:
        """The packed masks [n, W] of flat positions b * T + t (`flat` [n]); all bits set where
        the position is unconstrained."""
        out = torch.full(
            (len(flat), self.table.shape[1]), -1, dtype=torch.int32, device=self.table.device
        )
        if not len(self.positions):
            return out
        flat = flat.to(self.positions.device)
        slot = torch.searchsorted(self.positions, flat).clamp(max=len(self.positions) - 1)
        hit = self.positions[slot] == flat
        out[hit] = self.table[self.which[slot[hit]]]
        return out

    def dense(self) -> Tensor:
        """The [B, T, W] masks (all bits set where unconstrained)."""
        b, t = self.shape
        return self.at(torch.arange(b * t, device=self.positions.device)).view(b, t, -1)

    def to(self, device: torch.device | str) -> GrammarMasks:
        return GrammarMasks(
            self.shape, self.positions.to(device), self.which.to(device), self.table.to(device)
        )

    @property
    def nbytes(self) -> int:
        """Bytes held (index and table)."""
        return sum(t.numel() * t.element_size() for t in (self.positions, self.which, self.table))
