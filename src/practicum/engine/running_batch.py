"""A batch of the HF sampler that rows join and leave at every decode step (continuous batching,
as in Orca: Yu et al., OSDI 2022).

    batch = RunningBatch(sampler, adapter=True)
    row = batch.add(prompt_ids, params, seed)      # prefilled at the next step
    for row, token, logprob in batch.step(): ...   # one token for every row (two for a new one)
    batch.remove(row)                              # e.g. its client went away

A step decodes one token for every running row, then prefills the rows added since and joins
them to the batch. Rows are left-padded to a common width: a joining row's keys and values are
right-aligned with the running rows' (`kv_cache.join_rows`), and columns no row needs any more
are trimmed when rows leave. Each row samples with its own parameters and generator (a seeded
row draws the noise `sample_next` would draw for it alone), so its tokens and log-probs are
those of sampling it alone, up to the float rounding of a different batch shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from practicum.engine.base import Sample, SamplingParams
from practicum.engine.hf_model import Logits
from practicum.engine.hf_sampler import eval_mode
from practicum.engine.kv_cache import all_reserved, join_rows, keep_rows, reserved_cache
from practicum.engine.sampling import check_request, left_pad, positions, sample_next


@dataclass(eq=False)
class Row:
    """One request in the batch."""

    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    """The row's own noise (None for greedy)."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    """None while the row runs; then "stop" or "length" (as `Sample.finish_reason`)."""

    def sample(self, tokenizer) -> Sample:
        return Sample(
            self.token_ids,
            self.logprobs,
            tokenizer.decode(self.token_ids, skip_special_tokens=True),
            self.finish_reason or "length",
        )


class RunningBatch:
    """The rows one model is decoding (module doc); used by one thread."""

    def __init__(self, sampler, adapter: bool):
        self.sampler, self.adapter = sampler, adapter
        self.rows: list[Row] = []
        """Running rows, in batch order."""
        self.waiting: list[Row] = []
        """Rows added since the last step (not prefilled yet)."""
        self._cache = None
        self._mask: Tensor | None = None
        """[rows, width] attention mask: 0 on each row's left padding."""

    def __len__(self) -> int:
        return len(self.rows) + len(self.waiting)

    def add(self, prompt: list[int], params: SamplingParams, seed: int | None = None) -> Row:
        """Queue a row for the next step (raises ValueError for a request the engine refuses)."""
        check_request([prompt], params, [seed], self.sampler.max_positions)
        generator = None
        if params.temperature > 0:
            generator = torch.Generator(self.sampler.device).manual_seed(
                int(seed) if seed is not None else int(torch.randint(2**62, (1,)))
            )
        row = Row(list(prompt), params, generator)
        if params.max_new_tokens == 0:
            row.finish_reason = "length"
        else:
            self.waiting.append(row)
        return row

    def remove(self, row: Row) -> None:
        """Drop a row (finished or not) before the next step."""
        if row in self.waiting:
            self.waiting.remove(row)
        elif row in self.rows:
            self._keep([r for r in self.rows if r is not row])

    @torch.inference_mode()
    def step(self) -> list[tuple[Row, int, float]]:
        """Decode one token for every running row, then prefill the waiting rows and sample
        their first; returns (row, token, log-prob) per token. Finished rows have left."""
        events: list[tuple[Row, int, float]] = []
        lm, context = self.sampler._model(self.adapter)
        with context, eval_mode(lm):
            head = self.sampler._logits.get(id(lm)) or self.sampler._logits.setdefault(
                id(lm), Logits(lm)
            )  # each model's own head
            if self.rows:
                latest = torch.tensor(
                    [[r.token_ids[-1]] for r in self.rows], device=self.sampler.device
                )
                self._mask = torch.cat([self._mask, self._mask.new_ones(len(self.rows), 1)], 1)
                pos = self._mask.sum(dim=1, keepdim=True) - 1
                logits = head(lm, latest, self._mask, pos, self._cache, last_only=True)[:, -1]
                events += self._sampled(self.rows, logits)
                self._keep([r for r in self.rows if r.finish_reason is None])
            if self.waiting:
                events += self._prefill(lm, head)
        return events

    # -- internals ---------------------------------------------------------------------------------
    def _prefill(self, lm, head) -> list[tuple[Row, int, float]]:
        new, self.waiting = self.waiting, []
        ids, mask = left_pad([r.prompt for r in new], self.sampler.pad_id, self.sampler.device)
        cache = reserved_cache(lm.config, ids.shape[1] + max(self._room(r) for r in new))
        if not all_reserved(cache):
            raise ValueError(
                "continuous batching needs a model whose every layer has full "
                "attention (no sliding-window layers)"
            )
        logits = head(lm, ids, mask, positions(mask), cache, last_only=True)[:, -1]
        events = self._sampled(new, logits)
        going = torch.tensor(
            [i for i, r in enumerate(new) if r.finish_reason is None], dtype=torch.long
        )
        if len(going) == 0:
            return events
        if len(going) < len(new):
            keep_rows(cache, going.to(self.sampler.device))
            mask = mask[going.to(mask.device)]
        capacity = max(
            (self._cache.layers[0].length if self._cache is not None else 0), mask.shape[1]
        ) + max(self._room(r) for r in self.rows + new)
        self._cache = join_rows(self._cache, cache, capacity)
        self._mask = _join_masks(self._mask, mask)
        self.rows += [new[i] for i in going.tolist()]
        return events

    @staticmethod
    def _room(row: Row) -> int:
        return row.params.max_new_tokens - len(row.token_ids) + 1

    def _sampled(self, rows: list[Row], logits: Tensor) -> list[tuple[Row, int, float]]:
        """Sample each row's next token from its logits [rows, V] with its own parameters,
        record it and mark rows that finish. Rows of equal temperature and top-p are drawn in
        one `sample_next` call. (A per-row constraint, such as a grammar's allowed tokens,
        would mask its row of `logits` here, before the draw.)"""
        groups: dict[tuple[float, float], list[int]] = {}
        for j, r in enumerate(rows):
            groups.setdefault((r.params.temperature, r.params.top_p), []).append(j)
        if len(groups) == 1:
            ((temperature, top_p),) = groups
            gens = [r.generator for r in rows] if temperature > 0 else None
            tok, lp = sample_next(logits, temperature, top_p, gens)
        else:
            tok = torch.empty(len(rows), dtype=torch.long, device=logits.device)
            lp = torch.empty(len(rows), dtype=torch.float32, device=logits.device)
            for (temperature, top_p), js in groups.items():
                idx = torch.tensor(js, device=logits.device)
                gens = [rows[j].generator for j in js] if temperature > 0 else None
                tok[idx], lp[idx] = sample_next(logits[idx], temperature, top_p, gens)
        # one device-to-host transfer; float64 holds both ids and fp32 log-probs
        host_tok, host_lp = torch.stack([tok.double(), lp.double()]).tolist()
        events = []
        for r, t, lq in zip(rows, map(int, host_tok), host_lp):
            r.token_ids.append(t)
            r.logprobs.append(lq)
            events.append((r, t, lq))
            if (
                t in self.sampler.eos_ids
                or t in r.params.stop_token_ids
                or self.sampler._hit_stop_string(r.token_ids, r.params.stop_strings)
            ):
                r.finish_reason = "stop"
            elif len(r.token_ids) >= r.params.max_new_tokens:
                r.finish_reason = "length"
        return events

    def _keep(self, rows: list[Row]) -> None:
        """Shrink the batch to `rows` (a subsequence of `self.rows`), trimming the left padding
        that no remaining row needs."""
        if len(rows) == len(self.rows):
            return
        if not rows:
            self.rows, self._cache, self._mask = [], None, None
            return
        index = {id(r): j for j, r in enumerate(self.rows)}
        sel = torch.tensor([index[id(r)] for r in rows], device=self._mask.device)
        mask = self._mask[sel]
        drop = int((mask.cumsum(dim=1) == 0).sum(dim=1).min())  # columns padding in every row
        keep_rows(self._cache, sel, drop)
        self._mask, self.rows = mask[:, drop:], rows


def _join_masks(a: Tensor | None, b: Tensor) -> Tensor:
    """Two left-padded masks as one, each right-aligned at the wider one's width."""
    if a is None:
        return b
    width = max(a.shape[1], b.shape[1])
    pad = lambda m: torch.cat([m.new_zeros(len(m), width - m.shape[1]), m], 1)  # noqa: E731
    return torch.cat([pad(a), pad(b)])
