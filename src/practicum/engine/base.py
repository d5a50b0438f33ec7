"""The two faces of a policy: a Sampler that generates, and a Trainable the learner updates.

    sampler.generate(prompts, params, seeds, adapter=True) -> [Sample]    token ids in and out
    trainable.token_logprobs(ids, mask) -> [B, T] log-probs (differentiable)
    sampler.load_weights(trainable.export_weights(version))               after every update

They may be one set of weights in one process (the HF engine) or a separate inference engine
that only samples (vLLM) and receives the weights the learner publishes. Engines never see text
history: the actor keeps the exact ids (see `practicum.episode`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # torch stays unimported where only the dataclasses are needed (env workers)
    import torch
    from torch import Tensor, nn

    from practicum.engine.constraint import GrammarMasks


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    max_new_tokens: int = 128
    stop_strings: tuple[str, ...] = ()
    """Generation of a sequence stops once its decoded text contains one of these."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra stop ids besides the tokenizer's eos; the stop id itself is kept as sampled."""
    grammar: str | None = None
    """Lark grammar (llguidance syntax) every continuation must match: tokens it does not allow
    are masked before temperature and top-p, log-probs are those of the masked distribution,
    and a continuation ends once the grammar is complete (`practicum.engine.constraint`).
    None: free text."""

    def __post_init__(self) -> None:  # lists from callers become hashable tuples
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))


def derive_seed(*parts: object) -> int:
    """A 63-bit sampling seed from any parts, distinct parts giving unrelated seeds: an episode's
    from (run seed, group, slot), a turn's from (episode seed, turn), a service call's from its
    prompt ids (so a sampled call repeats exactly)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass
class Sample:
    token_ids: list[int]
    """Exactly the sampled ids (stop id included when one was sampled; never padding)."""
    logprobs: list[float]
    """Behaviour log-probs: log mu(token | prefix) under the distribution that was actually
    sampled from (grammar mask, temperature and top-p applied; 0.0 for greedy, a point mass)."""
    text: str
    finish_reason: Literal["stop", "length"]
    """'stop' (eos, stop id or stop string) or 'length' (max_new_tokens reached)."""


@dataclass
class WeightUpdate:
    """New weights for a sampler: what the learner publishes after an update."""

    version: int
    kind: Literal["lora", "full"]
    tensors: dict[str, Tensor]
    """lora: the adapter's tensors in peft's saved naming; full: the model's state dict. May be
    the trainable's live tensors (no copy): a sampler must read them before returning."""
    adapter_config: dict[str, Any] = field(default_factory=dict)
    """lora: r, lora_alpha, target_modules, ... (peft's adapter_config.json)."""


class QuietPart:
    """The `Part` methods (`practicum.runtime.parts`) of a part with no figures of its own and
    nothing to release when it closes."""

    def metrics(self) -> dict[str, float]:
        return {}

    def summary(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class SamplerFailure(RuntimeError):
    """The sampler itself failed (e.g. its remote engine died), not one request: every request
    of the call fails with it, none is retried alone."""


class Interrupted(SamplerFailure):
    """The call was stopped part-way by the sampler's `interrupt` event (the generation server
    is stopping: Ctrl-C, SIGTERM or the end of a run), so shutdown does not wait for it."""


class Sampler(Protocol):
    """Generates from a policy version; receives new weights from the learner. A sampler is a
    `Part` of the run (`practicum.runtime.parts`: metrics, summary, close; `QuietPart` when it
    has nothing to report)."""

    version: int
    """Policy version of the weights it samples from."""

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None = None,
        adapter: bool = True,
    ) -> list[Sample]:
        """One continuation per prompt (token-id lists, no padding). `seeds[i]` makes row i's
        draw repeatable and independent of its batch-mates (None: not seeded). adapter=False
        samples from the frozen base weights (the policy before any training)."""
        ...

    def load_weights(self, update: WeightUpdate) -> None:
        """Sample from `update`'s weights from now on, as policy version `update.version`."""
        ...

    def shares_trainable(self, adapter: bool) -> bool:
        """Whether generate(adapter=adapter) runs a module the learner trains or switches
        between train and eval mode: such a call must not run during a train step (the
        generation server defers it); any other call may overlap training."""
        ...

    def metrics(self) -> dict[str, float]: ...

    def summary(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class SleepingSampler(Protocol):
    """A sampler that can give its accelerator memory to a learner beside it: the generation
    server calls `sleep` when a train step starts, and when it ends either `wake_up` or, for a
    sampler that dropped its weights (`awaits_weights`: the publish replaces them), nothing:
    its `load_weights` wakes it around the reload (vLLM's sleep mode, `engine.vllm_sleep`).
    Such a sampler reports `shares_trainable(...) = True`, and no request reaches it while it
    sleeps."""

    awaits_weights: bool
    """Asleep with its weights dropped: only `load_weights` wakes it, so the step's publish
    must follow, even when the step trained nothing."""

    def sleep(self) -> None:
        """Free the memory the learner needs (a no-op unless configured to)."""
        ...

    def wake_up(self) -> None:
        """Take the memory back, weights kept; sampling and load_weights work again."""
        ...


class Trainable(Protocol):
    """The model the learner differentiates through."""

    tokenizer: Any
    pad_id: int

    def token_logprobs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        temperature: float = 1.0,
        return_entropy: bool = False,
        score_mask: Tensor | None = None,
        allowed: GrammarMasks | None = None,
        packed: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """logp[b, t] = log softmax(z[b, t-1] / T)[x[b, t]], [B, T] fp32 (0 at position 0 and on
        padding); with return_entropy also the entropy of each distribution (no gradient).
        score_mask [B, T]: only these positions are read, others may be 0 (saves work).
        allowed (`practicum.engine.constraint.GrammarMasks`): the softmax at a constrained
        position t runs over the tokens its grammar allowed at t only. packed: the rows run as
        one sequence of their real tokens, attention kept inside each row (no padding work;
        the same values)."""
        ...

    def trainable_parameters(self) -> list[nn.Parameter]: ...

    @property
    def module(self) -> nn.Module:
        """The torch module holding the trainable parameters: checkpoints name the weights and
        the optimizer state by its parameter names."""
        ...

    def frozen_base(self) -> AbstractContextManager[Any]:
        """Inside the block, token_logprobs are the frozen base model's (the KL reference)."""
        ...

    def export_weights(self, version: int) -> WeightUpdate:
        """The current trainable weights, to publish to a sampler."""
        ...

    def iter_full_tensors(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, Tensor]]:
        """The trainable weights one at a time as (name, full tensor), named as `export_weights`
        names them (a tied weight once), floating ones cast to `dtype`. Sharded, every rank runs
        it to the end and rank 0 gets the tensors."""
        ...

    def save(self, path: Path) -> None: ...

    def load_weights(self, path: Path) -> None: ...
