"""learner/load.py and the sharded save (learner/export.py): 3 gloo ranks build the model from
rank 0's reads of the files only, start from a saved policy (`model.init`) as one process does,
and write a policy folder that transformers, peft and the one-process learner load back.

One spawn (the `on_ranks` fixture) serves every test here; 3 ranks, so that shards are uneven
(64 rows: 22, 22, 20) and the padded pieces of `learner/shards.py` are exercised."""

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.ranks import config, episodes, load_on_ranks, one_process_learner, rl_step, spawn


@pytest.fixture(scope="module")
def on_ranks(tiny_model_dir, tmp_path_factory):
    """Policies trained one step by one process (LoRA, full) saved as `init` folders; a folder
    lacking weights; then 3 ranks' `load_on_ranks` with `model.init` set to them."""
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("load")
    for kind in ("lora", "full"):
        learner = one_process_learner(config(tiny_model_dir, kind == "lora"))
        rl_step(learner, episodes(1))
        learner.model.save(root / f"init-{kind}")
    lacking = root / "lacking"
    lacking.mkdir()
    (lacking / "policy.json").write_text(json.dumps({"lora": False, "model": "x"}))
    save_file({"model.norm.weight": torch.ones(64)}, lacking / "model.safetensors")
    (root / "no-weights").mkdir()
    (root / "no-weights" / "policy.json").write_text(json.dumps({"lora": False, "model": "x"}))
    cfgs = {
        kind: config(tiny_model_dir, kind == "lora", f"model.init={root / f'init-{kind}'}")
        for kind in ("lora", "full")
    }
    (root / "ranks").mkdir()
    spawn(3, load_on_ranks, cfgs["lora"], cfgs["full"], root / "ranks")
    return root, cfgs, torch.load(root / "ranks" / "report.pt", weights_only=False)


def opened(root, rank: int) -> list[str]:
    return json.loads((root / "ranks" / f"opened-{rank}.json").read_text())


@pytest.mark.slow
def test_only_rank_0_opens_the_weight_files(on_ranks, tiny_model_dir):
    root, _, _ = on_ranks
    assert opened(root, 1) == opened(root, 2) == []
    read = set(opened(root, 0))
    assert str(tiny_model_dir / "model.safetensors") in read  # the base, for both models
    assert str(root / "init-lora" / "adapter_model.safetensors") in read
    assert str(root / "init-full" / "model.safetensors") in read


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lora", "full"])
def test_ranks_start_from_model_init_as_one_process(on_ranks, kind):
    """The weights the ranks export are the saved policy's, bit for bit, named and tied as one
    process exports them; log-probs of the policy and of the frozen base (the KL reference:
    the base model, not `init`) agree with one process's."""
    _, cfgs, report = on_ranks
    one = one_process_learner(cfgs[kind]).model
    want = one.export_weights(7)
    got = report[kind]
    assert got["kind"] == want.kind and got["tensors"].keys() == want.tensors.keys()
    for name, tensor in want.tensors.items():
        assert torch.equal(got["tensors"][name], tensor), name
    ids = torch.randint(100, 5000, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logp = one.token_logprobs(ids, torch.ones_like(ids))
        with one.frozen_base():
            base = one.token_logprobs(ids, torch.ones_like(ids))
    assert (logp - base).abs().max() > 1e-3  # `init` moved the policy away from the base
    torch.testing.assert_close(got["logp"], logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(got["base"], base, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing")  # peft's, not ours
def test_the_streamed_lora_folder_is_the_one_process_one(on_ranks, tiny_model_dir, tmp_path):
    """Same tensors and adapter config as the one process's save; peft and
    `HFTrainable.load_weights` read it."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root, cfgs, _ = on_ranks
    one = one_process_learner(cfgs["lora"]).model
    one.save(tmp_path / "one")
    streamed, saved = root / "ranks" / "lora", tmp_path / "one"
    got, want = (load_file(f / "adapter_model.safetensors") for f in (streamed, saved))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    got_cfg, want_cfg = (
        json.loads((f / "adapter_config.json").read_text()) for f in (streamed, saved)
    )
    for c in (got_cfg, want_cfg):  # a set, written in any order
        c["target_modules"] = sorted(c["target_modules"])
    assert got_cfg == want_cfg
    assert (streamed / "tokenizer.json").is_file() and (streamed / "policy.json").is_file()

    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), streamed)
    loaded = {k: v for k, v in peft.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(want)
    assert_loads(cfgs["lora"], streamed, want)


@pytest.mark.slow
def test_the_streamed_full_folder_is_a_sharded_hf_model(on_ranks, tmp_path):
    """Several files of at most the size asked for, with the index; transformers loads the
    same weights as from the one process's save, and so does `HFTrainable.load_weights`."""
    from transformers import AutoModelForCausalLM

    root, cfgs, _ = on_ranks
    one = one_process_learner(cfgs["full"]).model
    one.save(tmp_path / "one")
    streamed = root / "ranks" / "full"
    files = sorted(streamed.glob("model-*.safetensors"))
    index = json.loads((streamed / "model.safetensors.index.json").read_text())
    assert len(files) > 2 and set(index["weight_map"].values()) == {f.name for f in files}
    small = [f for f in files if len(load_file(f)) > 1]
    assert small and all(f.stat().st_size < 200_000 + 10_000 for f in small)

    got = AutoModelForCausalLM.from_pretrained(streamed).state_dict()
    want = AutoModelForCausalLM.from_pretrained(tmp_path / "one").state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert_loads(cfgs["full"], streamed, want)


@pytest.mark.slow
def test_a_wrong_folder_is_refused_on_every_rank(on_ranks):
    """A LoRA folder into the full model, a folder lacking weights and one without weight
    files (rank 0 finds out, every rank raises the same one-line error instead of waiting in a
    collective)."""
    root, _, _ = on_ranks
    for rank in (0, 1, 2):
        errors = json.loads((root / "ranks" / f"errors-{rank}.json").read_text())
        assert len(errors) == 3
        assert "holds lora=True weights" in errors[0]
        assert "no weights for" in errors[1] and "model.embed_tokens.weight" in errors[1]
        assert "holds no .safetensors file" in errors[2]


def config_without_init(cfg):
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"init": None})})


def assert_loads(cfg, folder, want) -> None:
    """A fresh one-process learner (no init) loading `folder` exports exactly `want`."""
    fresh = one_process_learner(config_without_init(cfg)).model
    fresh.load_weights(folder)
    exported = fresh.export_weights(0).tensors
    assert all(torch.equal(exported[k], want[k]) for k in want)


def test_the_meta_device_build_gets_the_same_rotary_tables_under_rope_scaling(tiny_model_dir):
    """The sharded learner's model, built on the meta device (`empty_lm`), computes YaRN's
    rotary tables as the one-process model loaded whole does (and not the unscaled ones)."""
    from practicum.engine.hf_model import load_lm
    from practicum.learner.load import empty_lm

    yarn = {"rope_type": "yarn", "factor": 2.0}
    meta = empty_lm(tiny_model_dir, torch.float32, "sdpa", yarn).model.rotary_emb
    whole = load_lm(tiny_model_dir, torch.float32, torch.device("cpu"), "sdpa", yarn)
    plain = empty_lm(tiny_model_dir, torch.float32, "sdpa").model.rotary_emb
    assert torch.equal(meta.inv_freq, whole.model.rotary_emb.inv_freq)
    assert meta.attention_scaling == whole.model.rotary_emb.attention_scaling > 1
    assert not torch.equal(meta.inv_freq, plain.inv_freq)
