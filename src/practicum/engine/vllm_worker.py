"""vLLM worker extension: reload full weights in place (`VLLMSampler._load_full`), from a
safetensors file, from its bytes sent through `collective_rpc` (no disk), or streamed over a
weight group (`practicum.engine.weight_stream`) by the publishing process (a learner beside the
engine, or a sharded learner's rank 0); this worker is member first rank + its vLLM rank.

A second `model.load_weights` fails on CPU (the GEMM repacks weights and empties the
parameters); the worker's own layerwise `reload_weights` works, but leaves a tied `lm_head`
with its old packed copy, so it is re-tied and re-packed here.

`weight_fingerprints` is the engine's side of the post-sync check
(`practicum.engine.weight_check`): each parameter as the model computes with it. On a GPU that
is the parameter itself; on CPU a linear layer's kernel holds a packed copy of its own (the
parameter is emptied, and a tied `lm_head`'s parameter is the embedding's, whatever its kernel
holds), so it is read back through the kernel: the identity times W^T, exact (each output
element is one weight times 1 plus zeros).
"""

from __future__ import annotations

from collections.abc import Iterable


class WeightsReloader:
    """Mixed into vLLM's worker (`worker_extension_cls`); called via `collective_rpc`."""

    def reload_from_file(self, path: str) -> None:
        from safetensors.torch import load_file

        self._reload(load_file(path).items())

    def reload_from_bytes(self, blob: bytes) -> None:
        from safetensors.torch import load

        self._reload(load(blob).items())

    # -- weight_sync: broadcast ------------------------------------------------------------------
    def weight_device(self) -> str:
        """The GPU this worker holds (its UUID), or "cpu": the publisher refuses NCCL to a GPU
        of its own (NCCL cannot join two processes on one device)."""
        import torch

        if self.device is None or self.device.type != "cuda":
            return "cpu"
        return str(torch.cuda.get_device_properties(self.device).uuid)

    def receive_stream(
        self, target: dict, first_rank: int, bind: str | None
    ) -> dict[str, int] | None:
        """Receive one version streamed to `target` (`weight_stream`) as member first_rank +
        this worker's rank (joined at the first, kept while the target stays; its sockets on
        `bind`, this node's address) and reload it bucket by bucket; nccl receives on this
        worker's GPU, gloo on CPU. Returns the fingerprints the sender appended (a target with
        `verify`), else None."""
        from practicum.engine.weight_stream import Membership, WeightTarget

        member = getattr(self, "_weight_member", None)
        if member is None:
            member = self._weight_member = Membership(bind)
        group = member.of(WeightTarget(**target), first_rank + self.rank)
        arriving = group.receive_stream(self.device if group.backend == "nccl" else "cpu")
        try:
            self._reload(arriving)
        finally:
            try:
                for _ in arriving:  # whatever the reload left: the publisher sends every bucket
                    pass
            except Exception:
                member.close()  # mid-collective: the next publish forms the group anew
                raise
        sent = group.sent_fingerprints
        if (
            sent is not None
            and "lm_head.weight" not in sent
            and getattr(self.model_runner.model.config, "tie_word_embeddings", False)
        ):
            # a tied head travels once, as the embedding (`distinct_tensors`); `_reload`
            # re-ties vLLM's own lm_head to it, so that is what it must hold
            sent = {**sent, "lm_head.weight": sent["model.embed_tokens.weight"]}
        return sent

    # -- the post-sync check -------------------------------------------------------------------
    def weight_fingerprints(self) -> tuple[dict[str, int], dict[str, list[str]]]:
        """This worker's fingerprint of every parameter as the model computes with it (module
        doc), and the model's fused modules (`packed_modules_mapping`)."""
        from practicum.engine.vllm_sleep import release_cached_memory
        from practicum.engine.weight_check import fingerprint

        model = self.model_runner.model
        out = {}
        for prefix, module in model.named_modules():
            for name, param in module.named_parameters(recurse=False):
                key = f"{prefix}.{name}" if prefix else name
                if name == "weight" and _has_own_kernel(module):
                    out[key] = _kernel_fingerprint(module)
                elif not param.is_meta:
                    out[key] = fingerprint(param)
        packed = getattr(model, "packed_modules_mapping", {}) or {}
        release_cached_memory()
        return out, {k: list(v) for k, v in packed.items()}

    def _reload(self, tensors: Iterable) -> None:
        from practicum.engine.vllm_sleep import release_cached_memory

        self.reload_weights(weights_iterator=iter(tensors))
        model = self.model_runner.model
        if getattr(model.config, "tie_word_embeddings", False):
            model.lm_head.weight = model.model.embed_tokens.weight
            model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
        release_cached_memory()  # the reload's buffers, before the KV cache wakes


def _has_own_kernel(module) -> bool:
    """A layer whose forward multiplies by a CPU kernel's packed copy of its weight (a linear,
    or the LM head), not by the parameter."""
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return hasattr(module, "cpu_linear") and isinstance(module, (LinearBase, ParallelLMHead))


def _kernel_fingerprint(module, rows: int = 256) -> int:
    """The fingerprint of the weight `module`'s CPU kernel holds: the identity, a block of
    rows at a time, through the kernel gives W^T exactly (no bias)."""
    import torch

    from practicum.engine.weight_check import fingerprint

    size = (
        getattr(module, "input_size_per_partition", None)
        or getattr(module, "embedding_dim", None)
        or module.input_size
    )
    total = 0
    with torch.no_grad():
        for start in range(0, size, rows):
            n = min(rows, size - start)
            eye = torch.zeros(n, size, dtype=module.params_dtype)
            eye[torch.arange(n), start + torch.arange(n)] = 1
            total += fingerprint(module.cpu_linear(eye, module.weight, None))
    return total
