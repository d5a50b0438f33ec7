"""vLLM worker extension: reload full weights in place (`VLLMSampler._load_full`), from a
safetensors file, from its bytes sent through `collective_rpc` (no disk), or broadcast by the
publishing process over a weight group (`practicum.engine.weight_group`; this worker is rank
1 + its vLLM rank).

A second `model.load_weights` fails on CPU (the GEMM repacks weights and empties the
parameters); the worker's own layerwise `reload_weights` works, but leaves a tied `lm_head`
with its old packed copy, so it is re-tied and re-packed here.
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

    def init_weight_group(self, host: str, port: int, world: int, backend: str,
                          timeout_s: float) -> None:
        """Join the publisher's weight group (it forms the group at the same time)."""
        from practicum.engine.weight_group import WeightGroup

        self.close_weight_group()
        self._weight_group = WeightGroup.join(host, port, 1 + self.rank, world, backend,
                                              timeout_s)

    def receive_weights(self, meta: list, bucket_mb: float) -> None:
        """Receive one version by broadcast (metadata first, so buffers are allocated here)
        and reload it bucket by bucket; nccl receives on this worker's GPU, gloo on CPU."""
        group = self._weight_group
        device = self.device if group.backend == "nccl" else "cpu"
        arriving = group.receive([(n, tuple(s), d) for n, s, d in meta], device, bucket_mb)
        try:
            self._reload(arriving)
        finally:
            for _ in arriving:  # whatever the reload left: the publisher sends every bucket
                pass

    def close_weight_group(self) -> None:
        group = getattr(self, "_weight_group", None)
        if group is not None:
            group.close()
            self._weight_group = None

    def _reload(self, tensors: Iterable) -> None:
        self.reload_weights(weights_iterator=iter(tensors))
        model = self.model_runner.model
        if getattr(model.config, "tie_word_embeddings", False):
            model.lm_head.weight = model.model.embed_tokens.weight
            model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
