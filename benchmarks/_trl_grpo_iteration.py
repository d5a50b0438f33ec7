"""TRL's side of benchmarks/vs_trl.py: GRPOTrainer iterations driven in lockstep over stdin/stdout.

Runs in TRL's own venv (scripts/trl_venv.sh), never in practicum's. vs_trl.py starts it with a
JSON settings argument; it builds the trainer, prints {"ready": ...}, then before every
training step waits for a line on stdin and after it prints one JSON line: the step's wall
seconds and, inside it, the seconds spent in TRL's generation (`_generate_single_turn`, the
`transformers.generate` call) and the completion tokens sampled. Only this file's top level
(the prompt and the reward, shared with vs_trl.py) imports nothing outside the standard library.

    python benchmarks/_trl_grpo_iteration.py '{"model": "/path/to/hf/folder", "steps": 4, ...}'
"""

from __future__ import annotations

import json
import re
import sys
import time

PROMPT = "What is 37 * 24? Reply with the number only."
ANSWER = 888


def arithmetic_reward(text: str) -> float:
    """1 for the right number, 0.5 for another number (partial credit, so a group's rewards
    differ and the update is not zero), 0 for no number at all."""
    numbers = [int(n) for n in re.findall(r"-?\d+", text.replace(",", ""))]
    if ANSWER in numbers:
        return 1.0
    return 0.5 if numbers else 0.0


def main(settings: dict) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(settings["threads"])
    torch.manual_seed(settings["seed"])
    dtype = getattr(torch, settings["dtype"])
    steps = settings["steps"]
    group = settings["group_size"]
    model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": PROMPT}]}] * steps)
    lengths: list[int] = []

    def reward(completions, completion_ids, **_) -> list[float]:
        lengths.extend(len(c) for c in completion_ids)
        return [arithmetic_reward(c[-1]["content"]) for c in completions]

    config = GRPOConfig(
        output_dir=settings["out_dir"],
        use_cpu=True,
        bf16=dtype == torch.bfloat16,
        fp16=False,  # TRL defaults to bf16 autocast: match the dtype
        gradient_checkpointing=False,  # TRL's default is True; practicum's is False
        num_generations=group,
        per_device_train_batch_size=group,  # one forward/backward over the whole group
        gradient_accumulation_steps=1,
        steps_per_generation=1,  # one optimizer step per generation batch, like practicum
        max_completion_length=settings["new_tokens"],
        # every completion runs the full length (eos suppressed), as on practicum's side
        generation_kwargs={"min_new_tokens": settings["new_tokens"]},
        temperature=1.0,
        top_p=1.0,
        beta=0.0,  # no KL term, no reference model (practicum algo.kl_coef = 0)
        epsilon=settings["clip_low"],
        epsilon_high=settings["clip_high"],
        loss_type="dapo",  # token mean over the batch = practicum's token_mean
        learning_rate=settings["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=steps,
        num_train_epochs=1,
        use_vllm=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=settings["seed"],
        dataloader_num_workers=0,
    )
    peft = LoraConfig(
        r=settings["lora_r"],
        lora_alpha=settings["lora_alpha"],
        lora_dropout=0.0,
        target_modules=settings["target_modules"],
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=peft,
    )

    timers = {"generate": 0.0}
    generate = trainer._generate_single_turn

    def timed_generate(*args, **kwargs):
        t = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            timers["generate"] += time.perf_counter() - t

    trainer._generate_single_turn = timed_generate

    class Lockstep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if not sys.stdin.readline():  # the driver went away
                raise SystemExit(0)
            timers.update(generate=0.0, start=time.perf_counter())
            lengths.clear()

        def on_step_end(self, args, state, control, **kwargs):
            seconds = time.perf_counter() - timers["start"]
            print(
                json.dumps(
                    {
                        "seconds": seconds,
                        "generate_seconds": timers["generate"],
                        "tokens": sum(lengths),
                        "rows": len(lengths),
                    }
                ),
                flush=True,
            )

    trainer.add_callback(Lockstep())
    trainer.remove_callback(PrinterCallback)  # its log dicts would interleave with our JSON lines
    import peft as peft_pkg
    import transformers
    import trl

    print(
        json.dumps(
            {
                "ready": True,
                "versions": {
                    "trl": trl.__version__,
                    "transformers": transformers.__version__,
                    "peft": peft_pkg.__version__,
                    "torch": torch.__version__,
                },
                "threads": torch.get_num_threads(),
                "trainable_params": sum(
                    p.numel() for p in trainer.model.parameters() if p.requires_grad
                ),
            }
        ),
        flush=True,
    )
    trainer.train()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
