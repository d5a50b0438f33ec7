"""How much of a small LoRA update reaches a bf16 sampler, and what each way of sampling costs.

Options (bf16 base weights W, LoRA delta D = scale B A of RMS 1e-5 or 1e-4):
    cast     the merged copy's linears hold bf16(W + D) (merge in fp32, cast: the old MergedCopy)
    master   the merged copy's adapted linears hold W + D in fp32 and run in fp32 (MasterLinear)
    adapter  an independent bf16 copy with its own fp32 LoRA A, B (peft layers, activation space)
Reference: the same model in fp32 (W upcast, so the base is identical) with W + D merged.

Reported, for the delta's effect e_X = f_X(D) - f_X(0) against the reference's e_ref:
    weight    relative error ||e - e_ref|| / ||e_ref|| of the effective weights (the adapter
              holds A, B exactly: 0 by construction)
    layer     every adapted linear's output on the model's own bf16 inputs (8 prompts), output
              rounded to bf16 as the next layer receives it: relative error, and the share of
              the delta that arrives, <e, e_ref> / <e_ref, e_ref> (1: all of it, on average)
    logits    the same two on the logits of the 8 prompts (cut to the shortest's length)
and sampling tokens/s (temperature 1, 32 new tokens, eos ignored) at batch 1 and 8, best of 4
runs with the options interleaved (load from other processes hits them alike).

    PYTHONPATH=src python benchmarks/merged_bf16.py [--model smollm2-135m-instruct] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import practicum  # noqa: F401  (sets HF_HUB_OFFLINE)
from practicum.engine.base import SamplingParams, WeightUpdate
from practicum.engine.hf_model import Logits, load_lm, load_tokenizer
from practicum.engine.hf_sampler import HFSampler, MergedCopy
from practicum.engine.models import resolve_model
from practicum.engine.sampling import positions

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA = 16, 32


def lora_model(path, dtype):
    from peft import LoraConfig, get_peft_model

    lm = load_lm(path, dtype, torch.device("cpu"))
    peft = get_peft_model(
        lm, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, task_type="CAUSAL_LM")
    )
    return lm, peft.eval()


def random_update(peft, rms: float, seed: int = 0) -> WeightUpdate:
    """LoRA tensors whose delta scale B A has entries of RMS `rms` in every adapted linear."""
    from peft import get_peft_model_state_dict

    g = torch.Generator().manual_seed(seed)
    tensors = {}  # A ~ N(0, 1/r), B ~ N(0, (rms / scale)^2): entries of scale B A have RMS rms
    for k, v in get_peft_model_state_dict(peft).items():
        std = 1 / R**0.5 if "lora_A" in k else rms / (ALPHA / R)
        tensors[k] = torch.randn(v.shape, generator=g) * std
    return WeightUpdate(
        1, "lora", tensors, {"r": R, "lora_alpha": ALPHA, "target_modules": TARGETS}
    )


def deltas(update: WeightUpdate) -> dict[str, torch.Tensor]:
    out = {}
    for k, a in update.tensors.items():
        if "lora_A" in k:
            name = k.removesuffix(".lora_A.weight")
            out[name] = (ALPHA / R) * update.tensors[f"{name}.lora_B.weight"] @ a
    return out


def weight_error(base_peft, delta: dict, weights: dict) -> float:
    """||W_eff - (W + D)|| / ||D|| over all adapted linears."""
    err = norm = 0.0
    modules = dict(base_peft.named_modules())
    for name, d in delta.items():
        w = modules[name].base_layer.weight.float()
        err += (weights[name].float() - (w + d)).pow(2).sum().item()
        norm += d.pow(2).sum().item()
    return (err / norm) ** 0.5


def compare(effects: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """Relative error and arriving share of effects [(e_X, e_ref)], pooled."""
    err = sum((e - r).pow(2).sum().item() for e, r in effects)
    dot = sum((e * r).sum().item() for e, r in effects)
    norm = sum(r.pow(2).sum().item() for _, r in effects)
    return {"rel_err": (err / norm) ** 0.5, "share": dot / norm}


def layer_inputs(lm, names, batch):
    """Each adapted linear's input on `batch` (the model's own bf16 activations)."""
    seen, hooks = {}, []
    modules = dict(lm.named_modules())
    for name in names:
        hooks.append(
            modules[name].register_forward_pre_hook(
                lambda m, args, name=name: seen.__setitem__(
                    name, args[0].reshape(-1, args[0].shape[-1])
                )
            )
        )
    logits_of(lm, batch)
    for h in hooks:
        h.remove()
    return seen


def layer_effects(peft16, update, inputs) -> dict[str, dict]:
    """Per option, the delta's effect on every adapted linear's bf16 output."""
    out = {"cast": [], "master": [], "adapter": []}
    modules = dict(peft16.named_modules())
    for name, x in inputs.items():
        w = modules[name].base_layer.weight
        a = update.tensors[f"{name}.lora_A.weight"]
        b = update.tensors[f"{name}.lora_B.weight"]
        d = (ALPHA / R) * b @ a
        ref = x.float() @ d.T
        base16 = torch.nn.functional.linear(x, w)
        out["cast"].append(
            (
                torch.nn.functional.linear(x, (w.float() + d).bfloat16()).float() - base16.float(),
                ref,
            )
        )
        base32 = torch.nn.functional.linear(x.float(), w.float())
        out["master"].append(((base32 + ref).bfloat16().float() - base32.bfloat16().float(), ref))
        lora = (ALPHA / R) * (x.float() @ a.T) @ b.T  # peft: bf16 base output + fp32 adapter
        out["adapter"].append(((base16.float() + lora).bfloat16().float() - base16.float(), ref))
    return {k: compare(v) for k, v in out.items()}


def logits_of(lm, ids):
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        return Logits(lm)(lm, ids, mask, positions(mask)).float()


def tokens_per_s(samplers: dict, prompts, new_tokens: int, repeats: int) -> dict:
    """Best tokens/s of each sampler at batch 1 and 8, options interleaved in every repeat so
    that load from other processes hits them alike."""
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    best = {label: {1: 0.0, 8: 0.0} for label in samplers}
    for _ in range(repeats):
        for batch in (1, 8):
            for label, sampler in samplers.items():
                sampler.eos_ids = set()
                start = time.perf_counter()
                out = sampler.generate(prompts[:batch], params, seeds=list(range(batch)))
                rate = sum(len(s.token_ids) for s in out) / (time.perf_counter() - start)
                best[label][batch] = max(best[label][batch], rate)
    return best


def merged_fp32_effect(lm32, delta: dict, batch) -> torch.Tensor:
    """L_ref(D) - L_ref(0): the fp32 model's logits with the delta merged, minus without."""
    before = logits_of(lm32, batch)
    plain = dict(lm32.named_modules())
    with torch.no_grad():
        for name, d in delta.items():
            plain[name.removeprefix("base_model.model.")].weight.add_(d)
        after = logits_of(lm32, batch)
        for name, d in delta.items():
            plain[name.removeprefix("base_model.model.")].weight.sub_(d)
    return after - before


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    prompts = [
        tok(
            f"Question {i}: what is {i} times {i + 3}? Explain the steps, then answer "
            f"in one short sentence."
        ).input_ids
        for i in range(8)
    ]
    width = min(map(len, prompts))
    batch = torch.tensor([p[:width] for p in prompts])
    new_tokens, repeats = (8, 1) if args.quick else (32, 4)

    lm16, peft16 = lora_model(path, torch.bfloat16)  # the trainable stand-in (adapter option)
    lm32 = load_lm(path, torch.bfloat16, torch.device("cpu")).float()  # reference: same base
    cpu = torch.device("cpu")
    copies = {
        "cast": MergedCopy(peft16, path, torch.bfloat16, cpu, fp32_master=False),
        "master": MergedCopy(peft16, path, torch.bfloat16, cpu),
    }
    names = list(copies["cast"].layers)
    inputs = layer_inputs(
        copies["cast"].lm, [n.removeprefix("base_model.model.") for n in names], batch
    )
    inputs = {n: inputs[n.removeprefix("base_model.model.")] for n in names}
    rows = []
    for rms in (1e-5, 1e-4):
        update = random_update(peft16, rms)
        zero = WeightUpdate(
            0,
            "lora",
            {k: torch.zeros_like(v) for k, v in update.tensors.items()},
            update.adapter_config,
        )
        delta = deltas(update)
        ref_effect = merged_fp32_effect(lm32, delta, batch)
        layers = layer_effects(peft16, update, inputs)
        for label, copy in copies.items():
            copy.merge(zero)
            l0 = logits_of(copy.lm, batch)
            copy.merge(update)
            plain = dict(copy.lm.named_modules())
            weights = {n: plain[n.removeprefix("base_model.model.")].weight for n in delta}
            rows.append(
                {
                    "option": label,
                    "rms": rms,
                    "weight_rel_err": weight_error(peft16, delta, weights),
                    "layer": layers[label],
                    "logits": compare([(logits_of(copy.lm, batch) - l0, ref_effect)]),
                }
            )
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(peft16, zero.tensors)
        l0 = logits_of(lm16, batch)
        set_peft_model_state_dict(peft16, update.tensors)
        rows.append(
            {
                "option": "adapter",
                "rms": rms,
                "weight_rel_err": 0.0,
                "layer": layers["adapter"],
                "logits": compare([(logits_of(lm16, batch) - l0, ref_effect)]),
            }
        )
        for row in rows[-3:]:
            print(json.dumps(row), flush=True)
    samplers = {
        "cast": HFSampler(copies["cast"].lm, tok),
        "master": HFSampler(copies["master"].lm, tok),
        "adapter": HFSampler(lm16, tok),
        "fp32 (reference)": HFSampler(lm32, tok),
    }
    speed = tokens_per_s(samplers, prompts, new_tokens, repeats)
    print(
        json.dumps(
            {
                "model": args.model,
                "threads": torch.get_num_threads(),
                "precision": rows,
                "tokens_per_s": speed,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    from practicum.terminate import unwind_on_sigterm

    unwind_on_sigterm()  # `kill` unwinds: environments remove their work folders
    main()
