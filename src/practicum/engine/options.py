"""The engine's own options: the `model:` and `engine:` sections of a run config.

`practicum.config` uses these models as its sections, so an engine option is declared once,
here, with its description and its checks. Pydantic only (no torch): reading a config
imports none of the machinery.

    ModelOptions     model: the policy's weights, dtype, device, LoRA, RoPE scaling
    PolicyConfig     ModelOptions plus the run's seed: what the trainable and the samplers read
    EngineOptions    engine: the base of every engine kind's options (`kind` picks the model;
                     `practicum.engine.kinds` maps each kind to its options and its builder)
    HFOptions, VLLMOptions   the built-in kinds
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from practicum.engine.models import DEFAULT_MODEL

LLAMA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a Llama-style decoder: LoRA's default targets."""


class Options(BaseModel):
    """A section of options: a typo is an error naming the key; assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LinearRope(Options):
    rope_type: Literal["linear"] = Field(
        description="Position interpolation (arXiv 2306.15595): every position divided by factor."
    )
    factor: float = Field(
        gt=1, description="Context multiplier: the model covers its native context times factor."
    )


class YarnRope(Options):
    rope_type: Literal["yarn"] = Field(
        description="YaRN (arXiv 2309.00071): high frequencies "
        "kept, low ones interpolated, attention temperature "
        "scaled; what the SWE seed (arXiv 2508.03501) and Qwen "
        "use to reach 131k."
    )
    factor: float = Field(
        gt=1,
        description="Context multiplier: the model covers "
        "original_max_position_embeddings times factor.",
    )
    original_max_position_embeddings: int | None = Field(
        None,
        gt=0,
        description="The context the model was pretrained at (None = the model "
        "config's max_position_embeddings).",
    )
    attention_factor: float | None = Field(
        None, gt=0, description="Scale of the attention logits (None = YaRN's 0.1 ln(factor) + 1)."
    )
    beta_fast: float | None = Field(
        None,
        gt=0,
        description="Rotations per context above which "
        "a dimension is extrapolated, untouched (None = 32).",
    )
    beta_slow: float | None = Field(
        None,
        gt=0,
        description="Rotations per context below which "
        "a dimension is fully interpolated (None = 1).",
    )


class Llama3Rope(Options):
    rope_type: Literal["llama3"] = Field(
        description="Llama 3.1's frequency-dependent interpolation."
    )
    factor: float = Field(gt=1, description="Context multiplier of the low frequencies.")
    original_max_position_embeddings: int | None = Field(
        None,
        gt=0,
        description="The context the model was pretrained at (None = the model "
        "config's max_position_embeddings).",
    )
    low_freq_factor: float = Field(
        1.0,
        gt=0,
        description="Wavelengths above original / low_freq_factor are interpolated by factor.",
    )
    high_freq_factor: float = Field(
        4.0, gt=0, description="Wavelengths below original / high_freq_factor are kept."
    )


RopeScaling = Annotated[Union[LinearRope, YarnRope, Llama3Rope], Field(discriminator="rope_type")]
"""One variant per RoPE scaling type; applied to every copy of the model by
`practicum.engine.rope` (learner, reference, HF sampler, vLLM's hf_overrides)."""

LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")
"""transformers' RoPE types whose frequencies change with the sequence length: refused."""


class ModelOptions(Options):
    """The policy model (`model:`): which weights, in which dtype on which device, trained how."""

    model: str = Field(
        DEFAULT_MODEL,
        description="Local HF folder, a hub name already in the local cache, or a built-in name.",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Weights dtype; auto = bf16 where the hardware computes it natively "
        "(a CUDA GPU with bf16; a CPU with AVX-512 BF16 or AMX where bf16 also timed faster than "
        "fp32, measured once per machine) and LoRA is on, else fp32; a "
        "sampler with weights of its own (vLLM, an HF copy) on such a GPU samples full "
        "fine-tuning in bf16 too, while the learner keeps fp32 master weights.",
    )
    device: str = Field(
        "auto",
        description="Where the learner's model (and an in-process sampler) runs: auto "
        "(cuda when available, else cpu), cpu, cuda or cuda:N. A device this machine lacks is "
        "refused before anything loads.",
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field(
        "sdpa",
        description="transformers attention kernel: sdpa (PyTorch's fused attention, "
        "handles padded rows), eager, or flash_attention_2 (needs the flash-attn package and "
        "a CUDA GPU).",
    )
    lora: bool = Field(True, description="Train a LoRA adapter (peft); False = full fine-tuning.")
    lora_r: int = Field(16, gt=0, description="LoRA rank.")
    lora_alpha: int = Field(32, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA path.")
    lora_target_modules: list[str] = Field(
        list(LLAMA_LINEARS),
        description="Module names that get LoRA adapters (lm_head is "
        "refused: the output projection runs in fp32 from the base weights; train it with "
        "lora=false).",
    )
    gradient_checkpointing: bool | None = Field(
        None,
        description="Recompute each decoder layer's activations in the backward pass "
        "(less activation memory, about one more forward of learner time). None = on when the "
        "learner runs on a GPU, off on a CPU.",
    )
    rope_scaling: RopeScaling | None = Field(
        None,
        description="Stretch the rotary position embedding past the model's pretrained "
        "context, e.g. {rope_type: yarn, factor: 4}; applied identically to the learner, its "
        "KL reference, the HF sampler and vLLM (practicum.engine.rope). rollout.max_seq_len is "
        "checked against the scaled context. None = the model's own RoPE.",
    )

    merged_sampling: bool | None = Field(
        None,
        description="With LoRA, sample from a copy with the adapter merged into the weights "
        "(faster sampling on a CPU, one more copy of the adapted layers; the sampler then runs "
        "beside the learner in async mode). None = on a CPU only: on a GPU the sampler runs the "
        "learner's own adapter, whose bf16 log-probs the merged copy does not reproduce "
        "(benchmarks/lora_gap.py).",
    )
    init: str | None = Field(
        None,
        description="A saved policy folder to start from, e.g. the adapter `practicum rft` "
        "wrote (RUN/rft/policy); None = the pretrained model (a fresh adapter).",
    )

    @field_validator("device")
    @classmethod
    def _device_spelling(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError("expected auto, cpu, cuda or cuda:N")
        return v

    @field_validator("lora_target_modules")
    @classmethod
    def _no_lora_head(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("lora", True) and "lm_head" in v:
            raise ValueError(
                "lm_head is not supported (the output projection runs in fp32 from "
                "the base weights); train it with lora=false"
            )
        return v

    @field_validator("rope_scaling", mode="before")
    @classmethod
    def _static_rope(cls, v: Any) -> Any:
        kind = v.get("rope_type") if isinstance(v, dict) else None
        if kind in LENGTH_DEPENDENT_ROPE:
            raise ValueError(
                f"rope_type {kind} changes the frequencies with the sequence "
                f"length, so a KV-cached sampler and the learner would score a row "
                f"differently; use yarn, linear or llama3"
            )
        return v

    @property
    def rope_scaling_dict(self) -> dict | None:
        """`rope_scaling` as the plain dict `practicum.engine.rope` applies (None: the model's
        own RoPE)."""
        return self.rope_scaling.model_dump(exclude_none=True) if self.rope_scaling else None


class PolicyConfig(ModelOptions):
    """How to build the policy's engines (sampler + trainable): the `model:` section and the
    run's seed (`practicum.runtime.placement.policy_config`)."""

    seed: int = Field(
        0,
        description="Seed of the adapter's random initialisation and of vLLM's engine (run.seed).",
    )


def _transport_field():
    return Field(
        "auto",
        description="weight_sync=broadcast: how the bytes travel. collective = "
        "through the weight group (nccl between GPUs, gloo otherwise); ipc = shared in place "
        "with receivers on the sender's machine, only control messages through the group: "
        "CUDA IPC from the sender's GPU (a sampler on the learner's own GPU, where NCCL cannot "
        "go), shared memory from the CPU (practicum.engine.weight_ipc); auto = ipc where the "
        "learner in this process shares vLLM's GPU, else collective.",
    )


def _bucket_mb_field():
    return Field(
        256,
        gt=0,
        description="weight_sync=broadcast: MiB of weights per collective "
        "(consecutive tensors of one dtype flattened together; a larger tensor travels alone). "
        "The publishing rank and each receiver hold one bucket at a time beside the tensor "
        "being gathered, so this bounds the extra memory of a publish; hundreds of MB keep "
        "NCCL's per-call cost small beside its bytes (practicum.engine.weight_group).",
    )


class EngineOptions(Options):
    """The `engine:` section of any kind; each kind's model adds its own fields."""

    kind: str = Field(
        description="Sampling engine: a registered kind (hf, vllm, or one a "
        "package registers: `practicum.engine.kinds`)."
    )

    @property
    def broadcasts_weights(self) -> bool:
        """engine.weight_sync=broadcast: full weights streamed over a weight group from the
        publishing rank (`practicum.engine.weight_stream`); False for a kind without it."""
        return False


class HFOptions(EngineOptions):
    """engine.kind hf (`practicum.engine.hf`)."""

    kind: Literal["hf"] = Field(
        "hf",
        description="Sampling engine: hf = transformers, with "
        "practicum's own KV-cached sampling loop.",
    )
    weight_sync: Literal["gathered", "broadcast"] = Field(
        "gathered",
        description="hf with weights of its own (engine actors, or the driver's "
        "copy beside a sharded learner), full fine-tuning: how each published version gets "
        "there: gathered = a whole copy on the learner's rank 0 (CPU), handed over (through "
        "Ray's object store to engine actors); broadcast = streamed from a sharded learner "
        "(placement.kind learner_group or torchrun) over a weight group: every rank gathers "
        "one tensor at a time in the sampler's dtype and rank 0 sends it in buckets to every "
        "receiver (practicum.engine.weight_stream); no process holds a gathered copy.",
    )
    weight_bucket_mb: float = _bucket_mb_field()
    weight_transport: Literal["auto", "collective", "ipc"] = _transport_field()
    verify_weights: bool = Field(
        False,
        description="hf with weights of its own, streamed versions (weight_sync: "
        "broadcast): the sender follows the weights with a checksum of each tensor and the "
        "copy compares every parameter it computes with (practicum.engine.weight_check), so a "
        "tensor that silently stays stale stops the run. On in the test suite.",
    )

    @property
    def broadcasts_weights(self) -> bool:
        return self.weight_sync == "broadcast"


class VLLMOptions(EngineOptions):
    """engine.kind vllm (`practicum.engine.vllm`); read without vLLM installed."""

    kind: Literal["vllm"] = Field(
        "vllm",
        description="Sampling engine: vllm = vLLM's engine "
        "in its own venv (scripts/vllm_venv.sh); the learner stays "
        "HF + peft.",
    )
    max_model_len: int = Field(
        2048,
        gt=0,
        description="vllm: context length (prompt + turn) the engine reserves KV cache for.",
    )
    kv_cache_gb: int = Field(1, ge=1, description="vllm: CPU KV-cache size in whole GiB.")
    threads: str | None = Field(
        None,
        description="vllm: cores its CPU worker binds to, e.g. "
        "'0-1' (None = vLLM's default, one core).",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="vllm on a GPU: share of the GPU's memory the engine may "
        "take (weights, activations, KV cache). None = sized when it starts to the memory then "
        "free, less a margin, at most 0.9: beside a learner on the same GPU (the sampler in "
        "this process) it takes what the learner left; on GPUs of its own (placement.engine: "
        "engine actors) vLLM's usual 0.9 (less what its CUDA context already took).",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="vllm on GPUs: GPUs one engine "
        "shards the model over (an engine actor then needs "
        "placement.engine.gpus >= this).",
    )
    enable_sleep_mode: bool = Field(
        False,
        description="vllm on a GPU beside the learner: while the learner trains the "
        "engine sleeps (full weights dropped, as the publish replaces them: sleep level 2; "
        "LoRA's base offloaded to CPU memory: level 1; KV cache dropped) and wakes in the "
        "colocated order (practicum.engine.vllm_sleep); sampling waits for the update. The "
        "learner then creates its optimizer state before the engine starts, so the engine's "
        "memory share leaves room for it. The CPU build cannot sleep: only the sequencing "
        "applies.",
    )
    enforce_eager: bool = Field(
        True,
        description="vllm: run the model eagerly (no CUDA graphs, "
        "no torch.compile): quicker start-up, slower decoding on a GPU; "
        "the CPU build needs true.",
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="vllm: sequences the engine batches in one step (None = vLLM's default).",
    )
    weight_sync: Literal["memory", "file", "broadcast"] = Field(
        "file",
        description="vllm, full fine-tuning (model.lora=false): how each published "
        "version reaches the engine: file = a safetensors file in a temporary folder that the "
        "workers read; memory = the tensors serialised in memory and handed to its workers "
        "through collective_rpc (no disk, but slower than the file on CPU: "
        "benchmarks/weight_sync.py); broadcast = a collective from the publishing process to "
        "the workers over a process group of their own (practicum.engine.weight_group): NCCL "
        "GPU to GPU when the learner's weights are on a GPU vLLM does not use (e.g. "
        "model.device=cuda:2 beside an engine with tensor_parallel_size=2 on GPUs 0-1), gloo "
        "when they are CPU tensors; from a sharded learner (placement.kind learner_group or "
        "torchrun) the version is streamed: every rank gathers one tensor at a time and rank 0 "
        "sends it in buckets, no process holding a gathered copy (practicum.engine."
        "weight_stream). LoRA adapters always go through a small peft folder.",
    )
    weight_bucket_mb: float = _bucket_mb_field()
    weight_transport: Literal["auto", "collective", "ipc"] = _transport_field()
    verify_weights: bool = Field(
        False,
        description="vllm, full fine-tuning: after every publish, compare a checksum "
        "of each parameter the engine computes with against what the learner sent "
        "(practicum.engine.weight_check), so a tensor that silently stays stale (tied, renamed "
        "or sliced) stops the run. On a GPU it reads each parameter once; on CPU, where a "
        "linear layer's kernel keeps a packed copy, it reads each back through the kernel "
        "(about a forward pass of hidden-size tokens). On in the test suite.",
    )

    @property
    def broadcasts_weights(self) -> bool:
        return self.weight_sync == "broadcast"
