"""Colocation: one GPU handed back and forth between the learner and a vLLM engine beside it
(`engine.enable_sleep_mode`), around every train step:

    sleep   engine.sleep(level)      level 2 for full weights: the next publish overwrites
                                     them, so nothing is copied to CPU memory and back;
                                     level 1 with LoRA: the base weights wait in CPU memory
    ... the learner trains ...
    wake    empty_cache -> wake_up(weights) -> sync -> empty_cache -> wake_up(kv_cache)

The wake is verl's order (`verl/workers/fsdp_workers.py`; its PRs #575 and #6912 show the
failures without it). vLLM maps its memory with cuMem in its own processes and cannot use
the blocks the learner's caching allocator keeps after a step (activations, gradients), so
the learner's process returns them to the driver (`torch.cuda.empty_cache`) before each
wake. The weights wake first and alone, so the sync's buffers fit beside them; the KV cache,
the largest part, wakes last, once the sync's buffers are returned too. With LoRA the sync is
the adapter's reload, after the wake (it needs no memory of its own to speak of).

The learner's optimizer state exists before the engine sizes its share of the GPU
(`practicum.learner.step.zero_optimizer_state`), so the share leaves room for it.

Only the order is proven here (tests/engine/test_vllm_sleep.py drives the sampler with a
recording stand-in for vLLM and for the cache); the CPU build of vLLM cannot sleep, and no
practicum session has had vLLM on a GPU: a user's GPU proves the memory it saves.
"""

from __future__ import annotations

from collections.abc import Callable


def release_cached_memory() -> None:
    """Return the memory this process's CUDA caching allocator holds but does not use to the
    driver, so another process (vLLM's workers) can map it; nothing without CUDA."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class GPUHandover:
    """The sleep and the ordered wake of one vLLM engine (`vllm.LLM`) beside the learner."""

    def __init__(self, llm, full_weights: bool):
        self.llm = llm
        self.level = 2 if full_weights else 1
        """vLLM's sleep level: 2 drops the weights (a publish replaces them), 1 keeps them in
        CPU memory."""

    @property
    def drops_weights(self) -> bool:
        return self.level == 2

    def sleep(self) -> None:
        self.llm.sleep(level=self.level)

    def wake(self, sync: Callable[[], None] | None = None) -> None:
        """Wake in the colocated order (module doc), running `sync` (the weights' reload)
        between the weights and the KV cache."""
        release_cached_memory()
        self.llm.wake_up(tags=["weights"])
        if sync is not None:
            sync()
        release_cached_memory()
        self.llm.wake_up(tags=["kv_cache"])
