"""What `practicum serve RUN|CHECKPOINT|POLICY|MODEL` serves: the policy and its frozen base.

    served = load_served(Path("runs/calc"))    # a run folder: its latest checkpoint
    served.names                               # {"calc": True, "calc-base": False}  (adapter flag)
    sample = await served.generate(ids, params, seed, adapter=True)

A target is a run folder (its `checkpoints/latest`), a checkpoint folder (`.../step_N`), a saved
policy folder (`policy.json` beside the adapter or full weights, e.g. RUN/rft/policy), a stage
pipeline's folder (the policy of its last finished stage, `practicum.stages`), or a plain
model spec (built-in name or HF folder: policy and base are then the same weights). Both names
share one engine: the base is the policy with its adapter off (LoRA) or the untrained copy (full
fine-tuning), decoded in its own running batch of one `ContinuousServer`.

A reply is capped at the run's `rollout.max_seq_len` (from its config.yaml) when the target
belongs to a run, and at `serve --max-tokens`; prompt plus reply at the model's positions (an
agent's long prompt is served, but no reply runs longer than a training row could).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from practicum.engine.base import Sample, SamplingParams
from practicum.engine.chat import ChatFormat
from practicum.engine.continuous import ContinuousServer
from practicum.errors import PracticumError

POLICY_META = "policy.json"


@dataclass
class Target:
    """A resolved serve target."""

    name: str
    """Model id of the policy (the base is `<name>-base`)."""
    policy_dir: Path | None
    """The saved policy folder, or None for a plain model."""
    model: str
    """The base model spec."""
    step: int | None
    """Training step of the checkpoint, when known."""
    max_seq_len: int | None = None
    """The run's `rollout.max_seq_len`, when the target belongs to a run."""


def resolve_target(target: str | Path, name: str | None = None) -> Target:
    """Classify `target` (module doc); `name` overrides the served model id."""
    from practicum.learner import latest_checkpoint

    path = Path(target).expanduser()
    policy: Path | None = None
    if (path / "checkpoints").is_dir():
        ckpt = latest_checkpoint(path / "checkpoints")
        if ckpt is None:
            raise PracticumError(f"serve: run folder {path} has no complete checkpoint yet")
        policy, default_name = ckpt / "policy", path.resolve().name
    elif (path / "policy" / POLICY_META).is_file():
        policy, default_name = path / "policy", _run_name(path)
    elif (path / POLICY_META).is_file():
        policy, default_name = path, _run_name(path.parent)
    elif list(path.glob("*-*/stage.json")):  # a pipeline (`stages:`): its last stage's policy
        from practicum.stages import pipeline_policy

        policy, default_name = pipeline_policy(path), path.resolve().name
        if policy is None or not (policy / POLICY_META).is_file():
            raise PracticumError(f"serve: no finished stage of pipeline {path} left a policy")
    if policy is None:
        if path.exists() and not (path / "config.json").is_file():
            raise PracticumError(
                f"serve: {path} is not a run folder (no checkpoints/), a checkpoint (no "
                f"policy/{POLICY_META}), a saved policy (no {POLICY_META}) or a model folder"
            )
        return Target(name or path.name or str(target), None, str(target), None)
    meta = json.loads((policy / POLICY_META).read_text())
    step = re.fullmatch(r"step_(\d+)", policy.parent.name)
    return Target(
        name or default_name,
        policy,
        meta["model"],
        int(step.group(1)) if step else None,
        _run_max_seq_len(policy),
    )


def _run_max_seq_len(policy: Path) -> int | None:
    """`rollout.max_seq_len` of the run a policy folder belongs to: the config.yaml of its
    checkpoint, checkpoints or run folder (RUN/checkpoints/step_N/policy, RUN/rft/policy)."""
    import yaml

    for folder in list(policy.resolve().parents)[:3]:
        if (folder / "config.yaml").is_file():
            try:
                cfg = yaml.safe_load((folder / "config.yaml").read_text()) or {}
                value = cfg.get("rollout", {}).get("max_seq_len")
            except (yaml.YAMLError, AttributeError, UnicodeDecodeError):
                return None
            return value if isinstance(value, int) and value > 0 else None
    return None


def _run_name(checkpoint: Path) -> str:
    """`runs/calc/checkpoints/step_000016` -> "calc"; any other folder -> its own name."""
    p = checkpoint.resolve()
    return p.parent.parent.name if p.parent.name == "checkpoints" else p.name


def _policy_config(target: Target, dtype: str):
    from practicum.engine.options import PolicyConfig

    meta = json.loads((target.policy_dir / POLICY_META).read_text())
    rope = meta.get("rope_scaling")  # the model as it was trained (engine.rope)
    if not meta["lora"]:
        return PolicyConfig(
            model=target.model,
            dtype=dtype,
            lora=False,
            init=str(target.policy_dir),
            rope_scaling=rope,
        )
    adapter: dict[str, Any] = json.loads((target.policy_dir / "adapter_config.json").read_text())
    return PolicyConfig(
        model=target.model,
        dtype=dtype,
        lora=True,
        lora_r=adapter["r"],
        lora_alpha=adapter["lora_alpha"],
        lora_target_modules=sorted(adapter["target_modules"]),
        init=str(target.policy_dir),
        rope_scaling=rope,
    )


@dataclass
class Served:
    """The engine behind the endpoint: one generation server, two model ids."""

    target: Target
    server: ContinuousServer
    chat: ChatFormat
    context: int | None
    """Most tokens of prompt plus reply: the model's positions."""
    max_tokens: int | None = None
    """Most tokens of one reply: the run's max_seq_len and `serve --max-tokens`, the smaller."""
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    """Model id -> {"samples", "prompt_tokens", "completion_tokens"} served since start (every
    engine call: a forced tool call's field-filling calls too); on /health."""

    @property
    def tokenizer(self):
        return self.chat.tokenizer

    @property
    def names(self) -> dict[str, bool]:
        """Model id -> adapter flag (True: the trained policy; False: its frozen base)."""
        return {self.target.name: True, f"{self.target.name}-base": False}

    @property
    def vocab_size(self) -> int:
        return len(self.chat.tokenizer)

    async def generate(
        self, ids: list[int], params: SamplingParams, seed: int | None, adapter: bool, on_token=None
    ) -> Sample:
        """One continuation, decoded beside the concurrent requests; `on_token(id, logprob)`
        runs on the server thread per sampled token. Cancelling the awaiting task drops the
        row at the next decode step."""
        sample, _version = await asyncio.wrap_future(
            self.server.submit(ids, params, seed, adapter, on_token)
        )
        self.count(adapter, len(ids), len(sample.token_ids))
        return sample

    def count(self, adapter: bool, prompt_tokens: int, completion_tokens: int) -> None:
        """Add one finished sample to `usage`."""
        name = self.target.name if adapter else f"{self.target.name}-base"
        count = self.usage.setdefault(
            name, {"samples": 0, "prompt_tokens": 0, "completion_tokens": 0}
        )
        count["samples"] += 1
        count["prompt_tokens"] += prompt_tokens
        count["completion_tokens"] += completion_tokens

    def close(self) -> None:
        self.server.stop()


def load_served(
    target: str | Path,
    name: str | None = None,
    dtype: str = "auto",
    max_batch: int = 32,
    max_tokens: int | None = None,
) -> Served:
    """Load `target`'s weights into a started generation server (module doc)."""
    from practicum.engine.factory import build_sampler, load_trainable
    from practicum.engine.hf import load_frozen_sampler
    from practicum.engine.options import HFOptions

    t = resolve_target(target, name)
    if t.policy_dir is None:
        sampler = load_frozen_sampler(t.model, dtype)
    else:
        sampler = build_sampler(
            HFOptions(), policy := _policy_config(t, dtype), load_trainable(policy)
        )
    server = ContinuousServer(sampler, max_batch=max_batch).start()
    reply_cap = min((n for n in (t.max_seq_len, max_tokens) if n), default=None)
    return Served(t, server, ChatFormat(sampler.tokenizer), sampler.max_positions, reply_cap)
