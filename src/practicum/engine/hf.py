"""The Hugging Face engine (`engine.kind: hf`): a sampler over the trainable's weights, or over a
copy of its own.

    trainable, sampler = load_hf_engine(PolicyConfig(model="smollm2-135m-instruct"))
    sampler = build_sampler(engine_cfg, policy, trainable)   # the registry's entry (factory)
    sampler = build_sampler(engine_cfg, policy)              # `HFEngineCopy`: its own weights

With a trainable in the same process, both halves share one set of base weights (see
`hf_trainable` and `hf_sampler`). Without one (a Ray engine actor, or the driver's sampler
when the learner runs in an actor), `HFEngineCopy` holds a frozen copy of the policy and loads
every published version into it.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from practicum.engine.base import QuietPart, Sample, SamplingParams, WeightUpdate
from practicum.engine.device import auto_dtype
from practicum.engine.factory import load_sampling_copy, load_trainable
from practicum.engine.hf_model import (
    DTYPES,
    PolicyConfig,
    load_lm,
    load_tokenizer,
    merged_sampling_on,
    pick_device,
)
from practicum.engine.hf_sampler import HFSampler, MergedCopy
from practicum.engine.hf_trainable import HFTrainable, distinct_tensors
from practicum.engine.models import resolve_model
from practicum.engine.options import HFOptions
from practicum.engine.weight_check import StaleWeights, fingerprint, stale_tensors
from practicum.engine.weight_group import backend_for
from practicum.engine.weight_stream import (
    Membership,
    StreamedUpdate,
    StreamFormat,
    WeightRendezvous,
    WeightTarget,
    own_address,
    publish,
    receive_into,
)

__all__ = [
    "HFEngineCopy",
    "HFSampler",
    "HFTrainable",
    "PolicyConfig",
    "build_sampler",
    "load_frozen_sampler",
    "load_hf_engine",
]


def trainable_sampler(trainable: HFTrainable) -> HFSampler:
    """A sampler over `trainable`'s weights, holding them as version 0."""
    cfg = trainable.cfg
    merged = None
    if merged_sampling_on(cfg, trainable.device):
        merged = MergedCopy(
            trainable.model,
            resolve_model(cfg.model),
            trainable.lm.dtype,
            trainable.device,
            cfg.attn_implementation,
            rope_scaling=cfg.rope_scaling_dict,
        )
    sampler = HFSampler(
        trainable.lm,
        trainable.tokenizer,
        peft_model=trainable.model if cfg.lora else None,
        merged=merged,
        reference=None if cfg.lora else trainable.reference,
    )
    sampler.load_weights(trainable.export_weights(0))
    return sampler


def build_sampler(options: HFOptions, policy: PolicyConfig, trainable: HFTrainable | None = None):
    """The registry's builder for engine.kind hf (`practicum.engine.factory`)."""
    if trainable is not None:
        return trainable_sampler(trainable)
    return HFEngineCopy(
        policy, options.weight_bucket_mb, options.verify_weights, options.weight_transport
    )


def load_hf_engine(cfg: PolicyConfig) -> tuple[HFTrainable, HFSampler]:
    """The trainable model and its sampler, the sampler already holding the trainable's weights
    as version 0."""
    trainable = load_trainable(cfg)
    return trainable, trainable_sampler(trainable)


class HFEngineCopy(QuietPart):
    """An HF sampler with weights of its own: every published version is set into a frozen copy
    of the policy (peft adapter or full state dict), then into its sampler. Implements
    `practicum.engine.base.Sampler`; never shares a module with a trainable."""

    receivers = 1
    """Members it takes in a weight group (`receive_weights`)."""

    def __init__(
        self,
        policy: PolicyConfig,
        bucket_mb: float = 256.0,
        verify: bool = False,
        transport: str = "auto",
    ):
        self.verify = verify
        self.transport = "ipc" if transport == "ipc" else "collective"
        """How streamed versions travel (`engine.weight_transport`; auto: collective)."""
        """Streamed versions carry fingerprints, checked against the copy (`weight_check`)."""
        self.holder = load_sampling_copy(policy)
        self.sampler = trainable_sampler(self.holder)
        self.tokenizer = self.holder.tokenizer
        self.device = self.holder.device
        self.bucket_mb = bucket_mb
        self._member = Membership(own_address())
        self._rendezvous: WeightRendezvous | None = None
        self._target = None

    @property
    def version(self) -> int:
        return self.sampler.version

    @property
    def max_positions(self) -> int | None:
        return self.sampler.max_positions

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None = None,
        adapter: bool = True,
    ) -> list[Sample]:
        return self.sampler.generate(prompts, params, seeds, adapter)

    def load_weights(self, update: WeightUpdate | StreamedUpdate) -> None:
        """Set `update` into the copy; a `StreamedUpdate` is received here, bucket by bucket,
        from the sharded learner's rank 0 (`weight_stream`)."""
        if isinstance(update, StreamedUpdate):
            if self._target is None:
                if self._rendezvous is None:
                    self._rendezvous = WeightRendezvous(own_address() or "127.0.0.1")
                fmt = self.stream_format()
                backend = "gloo" if self.transport == "ipc" else fmt.backend
                self._target = self._rendezvous.target(
                    1 + fmt.receivers,
                    backend,
                    fmt.dtype,
                    self.bucket_mb,
                    self.verify,
                    self.transport,
                )
            target = self._target
            try:
                publish(update, target, lambda: self.receive_weights(update.version, target, 1))
            except BaseException:
                self._target = None  # formed anew at the next publish
                raise
            return
        # full weights arrive in the copy's dtype (bf16 beside an fp32 learner on a GPU);
        # adapter tensors as they are (peft keeps them in fp32, merged sampling merges in fp32)
        dtype = self.holder.lm.dtype if update.kind == "full" else None
        tensors = {
            k: v.to(self.device, dtype if v.is_floating_point() else None)
            for k, v in update.tensors.items()
        }
        with torch.no_grad():
            if update.kind == "lora":
                from peft import set_peft_model_state_dict

                result = set_peft_model_state_dict(self.holder.model, tensors)
                if result.unexpected_keys:
                    raise ValueError(f"unknown adapter tensors {result.unexpected_keys[:5]}")
            else:
                self.holder.model.load_state_dict(tensors)
        self.sampler.load_weights(replace(update, tensors=tensors))

    def stream_format(self) -> StreamFormat:
        return StreamFormat(
            self.receivers,
            backend_for(self.device),
            str(self.holder.lm.dtype).removeprefix("torch."),
        )

    def receive_weights(self, version: int, target: WeightTarget, rank: int) -> None:
        """Receive full weights streamed to `target` as member `rank`, copying each tensor
        into the copy as it arrives (one bucket held at a time), then sample them as
        `version`."""
        group = self._member.of(target, rank)
        try:
            state = self.holder.model.state_dict(keep_vars=True)
            got = receive_into(state, group.receive_stream(self.device))
        except BaseException:
            self._member.close()
            raise
        missing = set(distinct_tensors(self.holder.trainable_state())[0]) - got
        if missing:
            raise ValueError(f"the streamed weights lack {sorted(missing)[:5]}")
        if group.sent_fingerprints is not None:
            self.check_weights(group.sent_fingerprints)
        self.sampler.load_weights(WeightUpdate(version, "full", {}))

    def check_weights(self, sent: dict[str, int]) -> None:
        """The post-sync check: raise `StaleWeights` naming every parameter the copy computes
        with that differs from the fingerprints `sent` (`practicum.engine.weight_check`)."""
        held = {
            name: fingerprint(p)
            for name, p in self.holder.model.named_parameters(remove_duplicate=True)
        }
        problems = stale_tensors(sent, held, {})
        if problems:
            raise StaleWeights(
                f"after publishing, {len(problems)} of the HF copy's parameters "
                f"are not the learner's: " + "; ".join(problems[:8])
            )

    def shares_trainable(self, adapter: bool) -> bool:
        return False

    def close(self) -> None:
        self._member.close()


def load_frozen_sampler(model: str, dtype: str = "auto", device: str = "auto") -> HFSampler:
    """A sampler over a model that is never trained (a model-service backend); bf16 where the
    hardware computes it natively under "auto" (no optimizer will touch these weights)."""
    path = resolve_model(model)
    dev = pick_device(device)
    dt = DTYPES[dtype] if dtype != "auto" else auto_dtype(dev, lora=True)
    lm = load_lm(path, dt, dev).eval().requires_grad_(False)
    return HFSampler(lm, load_tokenizer(path))
