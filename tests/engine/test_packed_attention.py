"""engine/packed_attention.py: rows packed end to end attend only to themselves, with no mask over
the packed length; calls without boundaries run the model's own kernel unchanged."""

import pytest
import torch
import torch.nn.functional as F

from practicum.engine.hf_model import load_lm
from practicum.engine.packed_attention import (
    packed_layout,
    segment_attention,
    use_segment_attention,
)
from practicum.engine.sampling import positions


class Heads(torch.nn.Module):
    """An attention module as transformers hands it over (only its config is read)."""

    class config:
        _attn_implementation = "segments_sdpa"


def test_segments_attend_only_to_themselves():
    # 4 query heads over 2 key/value heads (grouped-query), segments of 3, 1 and 4 tokens: each
    # segment's output is causal attention over its own keys, as if it ran alone
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    out, _ = segment_attention(
        Heads(), q, k, v, None, scaling=0.25, **packed_layout([3, 1, 4], "cpu")
    )
    for a, b in ((0, 3), (3, 4), (4, 8)):
        alone = F.scaled_dot_product_attention(
            q[:, :, a:b],
            k[:, :, a:b].repeat_interleave(2, 1),
            v[:, :, a:b].repeat_interleave(2, 1),
            is_causal=True,
            scale=0.25,
        )
        assert torch.allclose(out[0, a:b], alone[0].transpose(0, 1), atol=1e-6)
    assert torch.allclose(out[0, 3], v[0, :, 3].repeat_interleave(2, 0))  # a 1-token row: itself


def test_a_packed_model_equals_the_padded_one_and_builds_no_mask(tiny_model_dir, monkeypatch):
    lm = load_lm(tiny_model_dir, torch.float32, torch.device("cpu"))
    torch.manual_seed(1)
    lengths = [5, 9, 2]
    ids = torch.zeros(3, 9, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n], mask[b, :n] = torch.randint(10, 1000, (n,)), 1
    with torch.no_grad():
        padded = lm.model(
            input_ids=ids, attention_mask=mask, position_ids=positions(mask)
        ).last_hidden_state
        use_segment_attention(lm)
        assert lm.config._attn_implementation == "segments_sdpa"
        again = lm.model(
            input_ids=ids, attention_mask=mask, position_ids=positions(mask)
        ).last_hidden_state
        # packed (16 tokens): every attention call is one row's, causal, with no mask
        calls, sdpa = [], F.scaled_dot_product_attention

        def spy(q, k, v, attn_mask=None, **kwargs):
            calls.append((q.shape[2], attn_mask, kwargs.get("is_causal")))
            return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

        monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
        real = mask.bool()
        packed = lm.model(
            input_ids=ids[real][None],
            attention_mask=None,
            position_ids=positions(mask)[real][None],
            **packed_layout(lengths, "cpu"),
        ).last_hidden_state
    assert calls == [(n, None, True) for _ in range(2) for n in lengths]  # 2 layers x 3 rows
    assert torch.equal(again, padded)  # no boundaries: the model's own kernel
    assert torch.allclose(packed[0], padded[real], atol=1e-5)


def test_boundaries_that_differ_for_keys_are_refused():
    q = torch.randn(1, 2, 4, 8)
    layout = packed_layout([2, 2], "cpu")
    with pytest.raises(ValueError, match="cu_seq_lens_k"):
        segment_attention(
            Heads(), q, q, q, None, **{**layout, "cu_seq_lens_k": torch.tensor([0, 1, 4])}
        )
