"""Token sampling and batch-layout helpers for the policy engine (pure tensor functions)."""

from __future__ import annotations

import torch
from torch import Tensor

from practicum.engine.base import SamplingParams


def sample_next(
    logits: Tensor, temperature: float, top_p: float, generators: list[torch.Generator] | None
) -> tuple[Tensor, Tensor]:
    """Next token per row and its behaviour log-prob ([b, V] -> [b], [b]).

    The log-prob is that of the distribution actually sampled from, so importance ratios
    against it are right: log_softmax(logits / T)[token], renormalised over the nucleus when
    top_p < 1 (log p - log sum of the kept mass); greedy (T = 0) is a point mass, log-prob 0.
    Sampling uses the exponential race argmax_v p_v / E_v with E_v ~ Exp(1), which draws v with
    probability p_v / sum p; noise comes from the row's own generator when given, so a row's
    draw does not depend on its batch-mates. (Inverse-CDF sampling, one uniform per row, is
    cheaper but maps last-bit differences in the logits, e.g. between thread counts, to a
    different token far more often than this race does, which breaks same-seed, same-tokens
    across placements.)
    """
    if temperature == 0:
        tok = logits.argmax(dim=-1)
        return tok, torch.zeros(tok.shape, dtype=torch.float32, device=logits.device)
    scaled = logits.float() if temperature == 1 else logits.float() / temperature
    logp = torch.log_softmax(scaled, dim=-1)
    probs = logp.exp()
    if top_p < 1:
        probs = top_p_filter(probs, top_p)
    if generators is None:
        noise = torch.empty_like(probs).exponential_()
    else:
        noise = torch.stack(
            [torch.empty_like(probs[0]).exponential_(generator=g) for g in generators]
        )
    tok = (probs / noise.clamp(min=1e-30)).argmax(dim=-1)
    chosen = logp.gather(-1, tok[:, None]).squeeze(-1)
    if top_p < 1:
        chosen = chosen - probs.sum(dim=-1).log()
    return tok, chosen


def top_p_filter(probs: Tensor, top_p: float) -> Tensor:
    """Nucleus truncation (Holtzman et al. 2020, arXiv 1904.09751): keep the smallest set of most
    likely tokens whose mass reaches top_p, zero the rest (not renormalised). [b, V] -> [b, V]."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(dim=-1) - sorted_p  # mass strictly ahead of each token
    sorted_p = sorted_p.masked_fill(before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """[B, L] ids and attention mask with each prompt right-aligned (left padding)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


def positions(mask: Tensor) -> Tensor:
    """Position ids that count only real tokens: 0 at each row's first token, any padding side."""
    return (mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def check_params(p: SamplingParams) -> None:
    if p.temperature < 0:
        raise ValueError(f"SamplingParams.temperature: expected >= 0, got {p.temperature}")
    if not 0 < p.top_p <= 1:
        raise ValueError(f"SamplingParams.top_p: expected in (0, 1], got {p.top_p}")
    if p.max_new_tokens < 0:
        raise ValueError(f"SamplingParams.max_new_tokens: expected >= 0, got {p.max_new_tokens}")


def check_request(
    prompts: list[list[int]],
    params: SamplingParams,
    seeds: list[int | None] | None,
    max_positions: int | None,
) -> None:
    """The checks every sampler's `generate` makes before sampling (errors name the argument)."""
    check_params(params)
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts")
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"generate: prompt {i} is empty")
    longest = max((len(p) for p in prompts), default=0)
    if max_positions and longest + params.max_new_tokens > max_positions:
        raise ValueError(
            f"generate: a {longest}-token prompt plus max_new_tokens={params.max_new_tokens} "
            f"exceeds the engine's {max_positions} positions"
        )
