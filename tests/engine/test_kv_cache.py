"""The sampling loop's reserved KV cache gives the same attention as transformers' own cache,
through growth past its reservation and rows leaving the batch."""

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from practicum.engine.hf_model import Logits
from practicum.engine.kv_cache import ReservedLayer, reserved_cache


def _decode(lm, cache, prompt: torch.Tensor, steps: list[torch.Tensor], drop_after: int):
    """Logits of a prefill then one token per step; rows 0 and 2 only after `drop_after`."""
    out = [lm(input_ids=prompt, past_key_values=cache, use_cache=True).logits[:, -1]]
    for i, tok in enumerate(steps):
        if i == drop_after:
            cache.batch_select_indices(torch.tensor([0, 2]))
        if i >= drop_after:
            tok = tok[[0, 2]]
        out.append(lm(input_ids=tok[:, None], past_key_values=cache, use_cache=True).logits[:, -1])
    return out


@torch.no_grad()
def test_reserved_cache_matches_the_dynamic_cache(tiny_model_dir):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 1000, (3, 5), generator=g)
    steps = [torch.randint(0, 1000, (3,), generator=g) for _ in range(6)]
    reserved = reserved_cache(lm.config, capacity=7)  # 5 + 6 positions: it must grow once
    assert all(isinstance(layer, ReservedLayer) for layer in reserved.layers)
    want = _decode(lm, DynamicCache(config=lm.config), prompt, steps, drop_after=3)
    got = _decode(lm, reserved, prompt, steps, drop_after=3)
    for w, h in zip(want, got):
        assert torch.allclose(w, h, atol=1e-5)
    assert reserved.get_seq_length() == 11
    assert reserved.layers[0].keys.shape[0] == 2


def test_skinny_output_projection_equals_the_linear_layer(tiny_model_dir):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    head = Logits(lm)
    weight = lm.get_output_embeddings().weight
    for rows in (1, 8, 65):  # 65 takes F.linear, the others the transposed product
        hidden = torch.randn(rows, 1, weight.shape[1])
        want = hidden @ weight.detach().T
        assert torch.allclose(head.head(hidden), want, atol=1e-5)
        assert head.head(hidden).is_contiguous()
