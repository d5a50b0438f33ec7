"""Outside-agent runs on the toy task: the overrides that make the example agent
(examples/openai_agent.py) its policy's client (the peaked tiny model is tests/conftest.py's)."""

import json
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agent.py"


def agent_overrides(
    model_dir: Path, out: Path, *extra: str, turns: int = 1, max_tokens: int = 4
) -> list[str]:
    """The toy task with the example agent: `turns` calls per episode, replies of
    `max_tokens` tokens, full fine-tuning of the tiny model."""
    return [
        f"model.model={model_dir}",
        "model.dtype=float32",
        "model.lora=false",
        "task.name=toy",
        "task.options.train_size=64",
        "task.options.eval_size=1",
        "rollout.max_turns=1",
        "sampling.max_new_tokens=4",
        "train.micro_batch_size=16",
        "train.warmup_steps=0",
        "train.checkpoint_every=100",
        "eval.every=0",
        "algo.dynamic_sampling=false",
        "algo.mask_overlong=false",
        "rollout.env_workers=16",
        f"rollout.agent.command=[python, {EXAMPLE}]",
        f"rollout.agent.env={{AGENT_TURNS: '{turns}', AGENT_MAX_TOKENS: '{max_tokens}'}}",
        f"run.out_dir={out}",
        "run.name=toy",
        *extra,
    ]


def metric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]
