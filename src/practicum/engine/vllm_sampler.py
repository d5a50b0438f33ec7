"""The vLLM sampler: `practicum.engine.base.Sampler` on vLLM's offline engine (`engine.kind: vllm`).

    trainable, sampler = load_vllm_engine(PolicyConfig(...), VLLMOptions())
    sampler.generate(prompts, params, seeds, adapter)     # token ids in, token ids out
    sampler.load_weights(trainable.export_weights(step))  # a fresh LoRA id per version

Same contract as the HF sampler (`hf_sampler`):
- the sampled ids end with the eos / stop id when one was sampled, or with the token that
  completed a stop string (vLLM keeps both in `token_ids`); the text is decoded from the ids;
- log-probs are those of the distribution sampled from (`logprobs_mode="processed_logprobs"`:
  log-softmax of the temperature-scaled, top-p-filtered logits), 0 for greedy;
- a per-request seed makes a row's draw repeatable and independent of its batch-mates;
- a grammar (`SamplingParams.grammar`, Lark) is passed as structured output to vLLM's guidance
  (llguidance) backend, which masks the logits before the sampler, so the processed log-probs
  are the masked distribution's, and samples eos once the grammar is complete, as the HF
  sampler does; the learner replays the same grammar (`practicum.engine.constraint`).

Weights: with LoRA every published version is written as a peft adapter folder and served under
a new adapter id (vLLM silently keeps serving a cached adapter whose id is reused); adapter=False
samples with no adapter (the frozen base). Full fine-tuning reloads the weights in place through
a worker extension (`vllm_worker`). vLLM needs its own environment (it pins torch and
transformers): `scripts/vllm_venv.sh`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from practicum.engine.base import Sample, SamplingParams, WeightUpdate
from practicum.engine.constraint import compiled
from practicum.engine.sampling import check_request


@dataclass
class VLLMOptions:
    """How to start the vLLM engine."""

    max_model_len: int = 2048
    """Context length the engine reserves KV cache for (prompt + generated tokens)."""
    kv_cache_gb: int = 1
    """CPU KV-cache size (VLLM_CPU_KVCACHE_SPACE, whole GiB)."""
    max_loras: int = 1
    """Adapters resident at once (one policy version at a time)."""
    threads: str | None = None
    """Cores vLLM's CPU worker binds to (VLLM_CPU_OMP_THREADS_BIND, e.g. "0-1"); None = its
    default (one core, the other left to the caller)."""


class VLLMSampler:
    """Implements `practicum.engine.base.Sampler` on `vllm.LLM` (module doc)."""

    def __init__(self, model_path: str | Path, tokenizer, *, dtype: str = "float32",
                 lora_rank: int | None = None, full_weights: bool = False,
                 options: VLLMOptions | None = None, seed: int = 0):
        opts = options or VLLMOptions()
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(opts.kv_cache_gb))
        if opts.threads:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", opts.threads)
        from vllm import LLM

        kwargs = {}
        if lora_rank is not None:
            kwargs.update(enable_lora=True, max_lora_rank=_vllm_rank(lora_rank),
                          max_loras=opts.max_loras, max_cpu_loras=opts.max_loras + 1)
        if full_weights:
            kwargs["worker_extension_cls"] = "practicum.engine.vllm_worker.WeightsReloader"
        self.llm = LLM(model=str(model_path), tokenizer=str(model_path), dtype=dtype,
                       max_model_len=opts.max_model_len, enforce_eager=True, seed=seed,
                       logprobs_mode="processed_logprobs",
                       structured_outputs_config={"backend": "guidance"}, **kwargs)
        self.tokenizer = tokenizer
        self.max_positions = opts.max_model_len
        self.version = 0
        self.model_path = str(model_path)
        self._dir = Path(tempfile.mkdtemp(prefix="practicum-vllm-"))
        self._lora = None
        self._next_id = 1
        self.lora = lora_rank is not None
        self.ignore_eos = False
        """Benchmarks only: sample past the end-of-turn token, so every row runs max_new_tokens."""

    # -- sampling --------------------------------------------------------------------------------
    def shares_trainable(self, adapter: bool) -> bool:
        """Never: the engine holds its own copy of the weights."""
        return False

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seeds: list[int | None] | None = None, adapter: bool = True) -> list[Sample]:
        from vllm import SamplingParams as VP
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        check_request(prompts, params, seeds, self.max_positions)
        if not prompts or params.max_new_tokens == 0:
            return [Sample([], [], "", "length") for _ in prompts]
        if not adapter and not self.lora and self.version > 0:
            raise ValueError("adapter=False (the frozen base) needs LoRA on the vLLM engine: "
                             "full fine-tuning overwrote the base weights in place")
        greedy = params.temperature == 0
        grammar = None
        if params.grammar is not None:  # refused here, in one line, like the HF sampler does
            compiled(params.grammar)
            grammar = StructuredOutputsParams(grammar=params.grammar)
        sps = [VP(temperature=params.temperature, top_p=params.top_p,
                  structured_outputs=grammar,
                  max_tokens=params.max_new_tokens, stop=list(params.stop_strings) or None,
                  stop_token_ids=list(params.stop_token_ids) or None, logprobs=0,
                  seed=None if seeds is None or greedy else seeds[i],
                  skip_special_tokens=True, detokenize=bool(params.stop_strings),
                  ignore_eos=self.ignore_eos)
               for i in range(len(prompts))]
        lora = self._lora if adapter and self.lora else None
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sps,
                                 lora_request=lora, use_tqdm=False)
        samples = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [0.0] * len(ids) if greedy else \
                [float(d[t].logprob) for t, d in zip(ids, c.logprobs)]
            samples.append(Sample(ids, lps, self.tokenizer.decode(ids, skip_special_tokens=True),
                                  "stop" if c.finish_reason == "stop" else "length"))
        return samples

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, update: WeightUpdate) -> None:
        if update.kind == "lora":
            self._load_lora(update)
        else:
            self._load_full(update)
        self.version = update.version

    def _load_lora(self, update: WeightUpdate) -> None:
        """Write the adapter as a peft folder and serve it under a fresh id (module doc)."""
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        if not self.lora:
            raise ValueError("this vLLM engine was started without LoRA; cannot load an adapter")
        folder = self._dir / f"v{update.version}-{self._next_id}"
        folder.mkdir(parents=True)
        save_file({k: v.detach().float().contiguous().cpu() for k, v in update.tensors.items()},
                  folder / "adapter_model.safetensors")
        cfg = update.adapter_config
        (folder / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": cfg["r"],
            "lora_alpha": cfg["lora_alpha"], "use_rslora": cfg.get("use_rslora", False),
            "target_modules": list(cfg["target_modules"]), "bias": "none",
            "fan_in_fan_out": False, "modules_to_save": None, "lora_dropout": 0.0,
            "base_model_name_or_path": self.model_path}))
        old = self._lora
        self._lora = LoRARequest(f"policy-v{update.version}-{self._next_id}", self._next_id,
                                 str(folder))
        self._next_id += 1
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def _load_full(self, update: WeightUpdate) -> None:
        """Reload every weight in place (worker extension), then drop the stale prefix cache."""
        from safetensors.torch import save_file

        path = self._dir / "weights.safetensors"
        tensors = {k: v.detach().contiguous().cpu() for k, v in update.tensors.items()}
        if "lm_head.weight" in tensors and "model.embed_tokens.weight" in tensors and \
                tensors["lm_head.weight"].data_ptr() == tensors["model.embed_tokens.weight"].data_ptr():
            tensors.pop("lm_head.weight")  # tied: safetensors refuses shared storage
        save_file(tensors, path)
        self.llm.collective_rpc("reload_from_file", args=(str(path),))
        self.llm.reset_prefix_cache()

    # -- a part of the placement -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return {}

    def summary(self) -> dict:
        return {}

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def _vllm_rank(r: int) -> int:
    """vLLM accepts only some max_lora_rank values; the smallest that holds r."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if allowed >= r:
            return allowed
    raise ValueError(f"LoRA rank {r} exceeds vLLM's largest (512)")
