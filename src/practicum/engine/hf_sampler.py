"""The HF sampler: a KV-cached sampling loop over a transformers model, fed weights by the learner.

    sampler.generate(prompts, params, seeds, adapter)    # left padding, per-row stops and seeds
    sampler.load_weights(update)                         # after every learner update

With LoRA and `merged_sampling`, sampling runs on a plain copy of the model whose adapted
linears hold W + scale * B A (`MergedCopy`): peft's LoRA layers add two small matmuls and
Python dispatch to each of ~200 adapted linears on every decode step, so the merged copy samples
faster (benchmarks/engine_throughput.py) and is never trained. `load_weights` recomputes the
merged linears from the published adapter tensors; in a bf16 model they are fp32
(`MasterLinear`), since bf16(W + scale * B A) rounds a small update back to W
(benchmarks/merged_bf16.py). Otherwise the sampler runs the trainable's own module, whose
weights the learner already changed in place, and `load_weights` only takes the new version.

adapter=False samples the frozen base: the trainable's module with the adapter disabled (LoRA)
or the untrained copy (full fine-tuning). Calls that run the trainable's module
(`shares_trainable`) must not overlap training: the generation server defers them while the
learner trains (`practicum.engine.server`); the others may.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from practicum.engine.base import Interrupted, QuietPart, Sample, SamplingParams, WeightUpdate
from practicum.engine.constraint import grammars_for, masked_logits
from practicum.engine.hf_model import FrozenReference, Logits, eos_ids, load_lm, pad_id
from practicum.engine.kv_cache import reserved_cache
from practicum.engine.sampling import check_request, left_pad, positions, sample_next


class MasterLinear(nn.Module):
    """A linear whose weight is held and applied in fp32 between activations of the model's
    dtype: a merged W + scale B A keeps an update far below bf16's resolution of W, which
    bf16(W + scale B A) rounds back to W (bf16 has 8 significant bits)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().float(), requires_grad=False)
        self.bias = (
            None
            if linear.bias is None
            else nn.Parameter(linear.bias.detach().float(), requires_grad=False)
        )

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x.float(), self.weight, self.bias).to(x.dtype)


class MergedCopy:
    """A plain copy of the base model whose adapted linears carry the merged LoRA update, in
    fp32 (`MasterLinear`) when the model is not: their weights are the fp32 merge's however
    small the update, and their outputs, rounded to the model's dtype, move by the update's
    effect on average (bf16(W + scale B A) would drop most of an update far below W's
    resolution). The copy is its own module: sampling from it never touches the trainable's."""

    def __init__(
        self,
        peft_model: nn.Module,
        base_path,
        dtype: torch.dtype,
        device: torch.device,
        attn_implementation: str = "sdpa",
        fp32_master: bool = True,
        rope_scaling: dict | None = None,
    ):
        self.lm = (
            load_lm(base_path, dtype, device, attn_implementation, rope_scaling)
            .eval()
            .requires_grad_(False)
        )
        plain = dict(self.lm.named_modules())
        self.layers: dict[str, tuple[Tensor, nn.Module]] = {}
        """peft module name -> (frozen base weight, the copy's linear to overwrite)."""
        for name, module in peft_model.named_modules():
            if hasattr(module, "lora_A") and hasattr(module, "base_layer"):
                # peft names it base_model.model.<name in the plain model>
                path = name.removeprefix("base_model.model.")
                target = plain[path]
                if fp32_master and target.weight.dtype != torch.float32:
                    parent, _, child = path.rpartition(".")
                    target = MasterLinear(target)
                    setattr(self.lm.get_submodule(parent), child, target)
                self.layers[name] = (module.base_layer.weight, target)
        if not self.layers:
            raise ValueError("MergedCopy: the model has no LoRA layers to merge")

    @torch.no_grad()
    def merge(self, update: WeightUpdate) -> None:
        """W_merged = W_base + scale * B @ A for every adapted linear (LoRA, Hu et al. 2021,
        arXiv 2106.09685), scale = alpha / r (alpha / sqrt(r) with rsLoRA), computed in fp32."""
        cfg = update.adapter_config
        r, alpha = cfg["r"], cfg["lora_alpha"]
        scale = alpha / (r**0.5 if cfg.get("use_rslora") else r)
        for name, (base, target) in self.layers.items():
            a = update.tensors[f"{name}.lora_A.weight"].float()
            b = update.tensors[f"{name}.lora_B.weight"].float()
            if target.weight.dtype == torch.float32:  # one fused op
                torch.addmm(base.float(), b, a, alpha=scale, out=target.weight)
            else:
                target.weight.copy_((base.float() + scale * (b @ a)).to(target.weight.dtype))


class HFSampler(QuietPart):
    """Implements `practicum.engine.base.Sampler` for a transformers causal LM (module doc)."""

    def __init__(
        self,
        lm: nn.Module,
        tokenizer,
        *,
        peft_model: nn.Module | None = None,
        merged: MergedCopy | None = None,
        reference: FrozenReference | None = None,
    ):
        self.lm, self.tokenizer = lm, tokenizer
        """The trainable's transformers model (LoRA layers injected when peft_model is given)."""
        self.peft_model, self.merged, self.reference = peft_model, merged, reference
        self.device = next(lm.parameters()).device
        self._logits: dict[int, Logits] = {}
        self.eos_ids = eos_ids(tokenizer, lm)
        self.pad_id = pad_id(tokenizer, self.eos_ids)
        self.version = 0
        self.max_positions = getattr(lm.config, "max_position_embeddings", None)
        self.interrupt = threading.Event()
        """Set (by the generation server's stop): a running `generate` raises `Interrupted` at
        its next token instead of finishing a batch nobody will read."""

    def load_weights(self, update: WeightUpdate) -> None:
        if self.merged is not None:
            if update.kind != "lora":
                raise ValueError(f"a merged LoRA sampler cannot load {update.kind!r} weights")
            self.merged.merge(update)
        self.version = update.version

    def shares_trainable(self, adapter: bool) -> bool:
        """True when `generate` runs the trainable's own module: without a merged copy, or
        adapter=False with LoRA (the trainable with its adapter disabled); the merged copy and
        the frozen reference of full fine-tuning are never trained."""
        if adapter:
            return self.merged is None
        return self.peft_model is not None or self.reference is None

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None = None,
        adapter: bool = True,
    ) -> list[Sample]:
        """Sample one continuation per prompt (see `Sampler.generate`).

        A sequence stops after an eos/stop id (kept) or after the token that completes a stop
        string (kept, nothing after it). Log-probs are those of the distribution sampled from:
        softmax(logits / T), renormalised over the nucleus when top_p < 1, and 0 for greedy.
        Under `params.grammar` the logits are masked to the grammar's allowed tokens first (so
        the log-probs are the masked distribution's) and a sequence also stops once the grammar
        is complete: then only eos is allowed, and it is sampled (log-prob 0).
        """
        check_request(prompts, params, seeds, self.max_positions)
        if not prompts or params.max_new_tokens == 0:
            return [Sample([], [], "", "length") for _ in prompts]
        lm, context = self._model(adapter)
        with context, eval_mode(lm):
            ids, lps, reasons = self._sample_loop(lm, prompts, params, seeds)
        return [
            Sample(i, lp, self.tokenizer.decode(i, skip_special_tokens=True), r)
            for i, lp, r in zip(ids, lps, reasons)
        ]

    def _model(self, adapter: bool):
        """(model to run, context to run it in) for the adapter flag."""
        if adapter:
            return (self.merged.lm if self.merged is not None else self.lm), nullcontext()
        if self.peft_model is not None:
            return self.lm, self.peft_model.disable_adapter()
        if self.reference is not None:
            with torch.inference_mode(False):
                return self.reference.lm, nullcontext()
        return self.lm, nullcontext()  # a frozen model: there is no adapter to turn off

    def _sample_loop(
        self,
        lm: nn.Module,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None] | None,
    ) -> tuple[list[list[int]], list[list[float]], list]:
        n = len(prompts)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lps: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n
        stop_ids = self.eos_ids | set(params.stop_token_ids)
        gens = None
        if seeds is not None and params.temperature > 0:  # None rows: a fresh random seed
            gens = [
                torch.Generator(self.device).manual_seed(
                    int(s) if s is not None else int(torch.randint(2**62, (1,)))
                )
                for s in seeds
            ]

        # Identical prompts (a GRPO group) are prefilled once; their rows then share its cache.
        unique: dict[tuple[int, ...], int] = {}
        row_of = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        ids, mask = left_pad([list(p) for p in unique], self.pad_id, self.device)
        pos = positions(mask)
        cache = reserved_cache(lm.config, ids.shape[1] + params.max_new_tokens)
        head = self._logits.setdefault(id(lm), Logits(lm))  # each model's own output layer
        logits = head(lm, ids, mask, pos, cache, last_only=True)[:, -1]
        if len(unique) < n:
            sel = torch.tensor(row_of, device=self.device)
            cache.batch_select_indices(sel)
            logits, mask, pos = logits[sel], mask[sel], pos[sel]
        rows = list(range(n))  # original index of each still-running row
        grammar = params.grammar
        if grammar is not None:  # one matcher per row; masks applied before temperature
            grammars = grammars_for(self.tokenizer)
            matchers = [grammars.matcher(grammar) for _ in range(n)]
            packed = torch.empty(n, grammars.width, dtype=torch.int32)
        for _ in range(params.max_new_tokens):
            if self.interrupt.is_set():
                raise Interrupted("generation interrupted: the generation server is stopping")
            row_gens = [gens[i] for i in rows] if gens is not None else None
            if grammar is not None:
                logits = masked_logits(
                    logits, grammars.fill([matchers[i] for i in rows], packed[: len(rows)])
                )
            tok, lp = sample_next(logits, params.temperature, params.top_p, row_gens)
            # one device-to-host transfer per step; float64 holds both ids and fp32 log-probs
            host_tok, host_lp = torch.stack([tok.double(), lp.double()]).tolist()
            keep = []
            for j, (i, t, lq) in enumerate(zip(rows, map(int, host_tok), host_lp)):
                out_ids[i].append(t)
                out_lps[i].append(lq)
                if grammar is not None:  # a complete grammar allows only eos, a stop id
                    grammars.consume(matchers[i], t, grammar)
                if t in stop_ids or self._hit_stop_string(out_ids[i], params.stop_strings):
                    reasons[i] = "stop"
                elif len(out_ids[i]) < params.max_new_tokens:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(rows):  # finished rows leave the batch and the KV cache
                sel = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(sel)
                tok, mask, pos = tok[sel], mask[sel], pos[sel]
                rows = [rows[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
            pos = pos[:, -1:] + 1
            logits = head(lm, tok[:, None], mask, pos, cache, last_only=True)[:, -1]
        return out_ids, out_lps, reasons

    def _hit_stop_string(self, ids: list[int], stops: tuple[str, ...]) -> bool:
        # Earlier tokens cannot have completed a stop string (we would have stopped), so any
        # match now was completed by the latest token: it lies in the text's tail.
        if not stops:
            return False
        tail = tail_text(self.tokenizer, ids, max(map(len, stops)))
        return any(s in tail for s in stops)


TAIL_SLACK = 4
"""Characters a window's decoded text may get wrong at its start: a window that starts inside a
UTF-8 character decodes its leading bytes to up to 3 replacement characters, and a SentencePiece
window drops its first token's leading space."""


def tail_text(tokenizer, ids: list[int], chars: int) -> str:
    """The decoded text of the last tokens of `ids`: every string of up to `chars` characters
    that ends in the last token's text (or in a character it completes) is in it exactly as in
    the whole text, because the window holds at least chars + TAIL_SLACK characters before the
    last token. Tokens that decode to nothing (special tokens, partial characters) only widen
    the window; at worst it is the whole text."""
    n = chars + TAIL_SLACK + 1
    while n < len(ids):
        before = tokenizer.decode(ids[-n:-1], skip_special_tokens=True)
        if len(before) >= chars + TAIL_SLACK:
            break
        n *= 2
    return tokenizer.decode(ids[-n:], skip_special_tokens=True)


@contextmanager
def eval_mode(lm: nn.Module):
    was_training = lm.training
    lm.eval()
    try:
        yield
    finally:
        lm.train(was_training)
