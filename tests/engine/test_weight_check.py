"""The post-sync check's arithmetic (engine/weight_check.py): fingerprints are exact, survive
fusing and sharding, and name each way a parameter can be stale. The engine's side runs in
tests/vllm/test_vllm_weights.py."""

import torch

from practicum.engine.weight_check import (
    combine_ranks,
    engine_name,
    fingerprint,
    fingerprints,
    stale_tensors,
)

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def test_a_fingerprint_is_the_sum_of_the_bit_patterns():
    # bf16 1.0 = 0x3F80 = 16256, -2.0 = 0xC000 = -16384 as int16; -0.0 counts as +0.0 (0)
    t = torch.tensor([1.0, -2.0, -0.0], dtype=torch.bfloat16)
    assert fingerprint(t) == 16256 - 16384
    # fp32 1.0 = 0x3F800000; one ulp up changes the sum by exactly one
    one = torch.tensor([1.0])
    assert fingerprint(one) == 0x3F800000
    assert fingerprint(torch.nextafter(one, torch.tensor([2.0]))) == 0x3F800000 + 1


def test_a_fused_or_sharded_parameter_has_the_sum_of_its_parts():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, 8, generator=g) for n in (8, 4, 4))
    qkv = torch.cat([q, k, v])
    assert fingerprint(qkv) == fingerprint(q) + fingerprint(k) + fingerprint(v)
    shards = qkv.chunk(2, dim=1)
    assert combine_ranks([{"w": fingerprint(s)} for s in shards]) == {"w": fingerprint(qkv)}
    assert combine_ranks([{"n": fingerprint(q)}] * 2) == {"n": fingerprint(q)}  # replicated


def test_the_sender_casts_as_the_engine_rounds():
    """An fp32 tensor fingerprinted in bf16 matches the bf16 parameter it was copied into."""
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    param = torch.empty(64, 64, dtype=torch.bfloat16)
    param.copy_(w)
    assert fingerprints({"w": w}, torch.bfloat16) == {"w": fingerprint(param)}
    assert fingerprints({"w": w}, torch.float32)["w"] != fingerprint(param)


def test_checkpoint_names_map_to_the_engines_fused_parameters():
    assert (
        engine_name("model.layers.3.self_attn.k_proj.weight", PACKED)
        == "model.layers.3.self_attn.qkv_proj.weight"
    )
    assert (
        engine_name("model.layers.3.mlp.up_proj.weight", PACKED)
        == "model.layers.3.mlp.gate_up_proj.weight"
    )
    assert engine_name("model.norm.weight", PACKED) == "model.norm.weight"


def test_each_kind_of_stale_parameter_is_named():
    attn = "model.layers.0.self_attn."
    sent = {
        attn + "q_proj.weight": 5,
        attn + "k_proj.weight": 7,
        attn + "v_proj.weight": 1,
        "lm_head.weight": 3,
        "model.renamed.weight": 2,
    }
    held = {
        "model.layers.0.self_attn.qkv_proj.weight": 13,
        "lm_head.weight": 3,
        "model.norm.weight": 9,
    }
    assert stale_tensors(sent, held, PACKED) == [
        "model.renamed.weight: sent, but the engine has no such parameter",
        "model.norm.weight: nothing was sent into it (it kept its old value)",
    ]
    held["lm_head.weight"] = 4  # e.g. a tied head whose packed copy was not refreshed
    held["model.layers.0.self_attn.qkv_proj.weight"] = 12
    problems = stale_tensors(sent, held, PACKED)
    assert "lm_head.weight: differs from what was sent (lm_head.weight)" in problems
    assert (
        "model.layers.0.self_attn.qkv_proj.weight: differs from what was sent "
        "(model.layers.0.self_attn.q_proj.weight, model.layers.0.self_attn.k_proj.weight, "
        "model.layers.0.self_attn.v_proj.weight)"
    ) in problems
    del sent["model.renamed.weight"]
    sent["model.norm.weight"] = 9
    held.update({"lm_head.weight": 3, "model.layers.0.self_attn.qkv_proj.weight": 13})
    assert stale_tensors(sent, held, PACKED) == []
