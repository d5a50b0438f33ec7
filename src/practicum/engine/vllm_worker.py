"""vLLM worker extension: reload full weights in place (`VLLMSampler._load_full`), from a
safetensors file or from its bytes sent through `collective_rpc` (no disk).

A second `model.load_weights` fails on CPU (the GEMM repacks weights and empties the
parameters); the worker's own layerwise `reload_weights` works, but leaves a tied `lm_head`
with its old packed copy, so it is re-tied and re-packed here.
"""

from __future__ import annotations


class WeightsReloader:
    """Mixed into vLLM's worker (`worker_extension_cls`); called via `collective_rpc`."""

    def reload_from_file(self, path: str) -> None:
        from safetensors.torch import load_file

        self._reload(load_file(path))

    def reload_from_bytes(self, blob: bytes) -> None:
        from safetensors.torch import load

        self._reload(load(blob))

    def _reload(self, tensors: dict) -> None:
        self.reload_weights(weights_iterator=iter(tensors.items()))
        model = self.model_runner.model
        if getattr(model.config, "tie_word_embeddings", False):
            model.lm_head.weight = model.model.embed_tokens.weight
            model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
