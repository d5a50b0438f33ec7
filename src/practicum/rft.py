"""`practicum rft CONFIG`: rejection fine-tuning, the first stage of arXiv 2508.03501.

    1. sample rft.samples_per_task episodes of every training task (rft.tasks of them) from the
       current policy (model.init, or the pretrained model), stored as they finish;
    2. keep the episodes that solved their task, ended normally and were not cut by a length
       limit (`algo.rft.rft_keep`; with algo.mask_overlong, as RL does);
    3. SFT on the kept episodes' policy tokens only, malformed turns masked
       (`algo.rft.rft_mask`, `rft_loss`), rft.epochs passes of rft.batch_size rows per update;
    4. save the adapter to RUN/rft/policy, evaluate held-out before and after.

Then RL starts from it: `practicum train CONFIG model.init=RUN/rft/policy`. Everything goes to
RUN/rft/ (episodes.jsonl, metrics.jsonl, eval/, policy/, summary.json); a killed run resumes
sampling where the store ends, and a finished one is not redone.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from practicum.algo.rft import rft_keep, rft_loss, rft_mask
from practicum.batch import Row, pad_rows, training_rows
from practicum.config import Config
from practicum.episode import Episode
from practicum.report import solved
from practicum.runtime.progress import TrainProgress
from practicum.runtime.session import Session, open_session


def stage_config(cfg: Config, name: str) -> Config:
    """The same config with its run folder moved to RUN/<name> (resumable, never cleared): the
    folder of a warm-start stage (rft, sft) inside the run."""
    run = cfg.run.model_copy(update={"out_dir": str(cfg.run_dir), "name": name, "resume": True})
    return cfg.model_copy(update={"run": run})


def rft_config(cfg: Config) -> Config:
    return stage_config(cfg, "rft")


def run_rft(cfg: Config, progress: bool = True) -> dict:
    sub = rft_config(cfg)
    done = sub.run_dir / "summary.json"
    if done.exists() and (sub.run_dir / "policy").exists():
        return json.loads(done.read_text())
    started = time.time()
    s = open_session(sub)
    try:
        before = stored_eval(sub.run_dir, "before") or evaluate(s, "before rft", progress)
        episodes = sample(s, progress)
        kept = [e for e in episodes  # overlong episodes: excluded as in RL (algo.mask_overlong)
                if rft_keep(solved(e, cfg.rft.min_reward), e.failure is not None,
                            e.overlong and cfg.algo.mask_overlong)]
        losses = finetune(s, kept, progress)
        s.trainable.save(sub.run_dir / "policy")
        s.publish()
        after = evaluate(s, "after rft", progress) if kept else \
            unchanged_eval(sub.run_dir, before)
    finally:
        s.close()
    per_task: dict[str, int] = {}
    for e in kept:
        per_task[e.task_id] = per_task.get(e.task_id, 0) + 1
    summary = {
        "run_dir": str(sub.run_dir), "policy": str(sub.run_dir / "policy"),
        "sampled": len(episodes), "kept": len(kept),
        "tasks": len({e.task_id for e in episodes}), "tasks_with_a_kept_episode": len(per_task),
        "sft_updates": len(losses), "sft_loss_first": losses[0] if losses else None,
        "sft_loss_last": losses[-1] if losses else None,
        "eval_before": before, "eval_after": after, "wall_seconds": time.time() - started,
        "next": f"practicum train ... model.init={sub.run_dir / 'policy'}",
    }
    done.write_text(json.dumps(summary, indent=1))
    return summary


def evaluate(s: Session, when: str, progress: bool) -> dict:
    """The held-out evaluation `when` ("before rft": saved as eval/before.json), with its
    progress line on stdout and in RUN/progress.log."""
    t0 = time.perf_counter()
    result = s.evaluate(when.split()[0])
    TrainProgress(0, enabled=progress, log_dir=s.run_dir).evaluation(
        0, result, time.perf_counter() - t0, when)
    return result


def stored_eval(run_dir: Path, label: str) -> dict | None:
    """A held-out evaluation this run already wrote (a resumed run does not repeat it)."""
    path = run_dir / "eval" / f"{label}.json"
    if not path.exists():
        return None
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "episodes"}


def unchanged_eval(run_dir: Path, before: dict) -> dict:
    """Nothing was kept, so the adapter was saved untouched: 'after' is 'before' (greedy
    evaluation of the same weights), written without sampling the held-out tasks again."""
    data = json.loads((run_dir / "eval" / "before.json").read_text())
    data.update(label="after", reused_from="before (no episode kept: the policy is unchanged)")
    (run_dir / "eval" / "after.json").write_text(json.dumps(data, indent=1))
    return {**before, "label": "after"}


def sample(s: Session, progress: bool) -> list[Episode]:
    """k episodes of each task, in chunks of one batch; chunks already stored are reused."""
    r = s.cfg.rft
    tasks = s.suite.train_tasks[: r.tasks or None]
    items = [(t, f"rft/{i}/{t.task_id}", k) for i, t in enumerate(tasks)
             for k in range(r.samples_per_task)]
    chunk = s.cfg.rollout.group_size * s.cfg.rollout.tasks_per_step
    episodes = list(s.store)
    with TrainProgress(len(items), len(episodes), enabled=progress, label="rft sample",
                       log_dir=s.run_dir) as bar:
        for start in range(len(episodes), len(items), chunk):
            eps = s.rollout(items[start:start + chunk], r.temperature)
            s.store.append(eps)
            episodes += eps
            bar.update(len(episodes), {"reward_mean": sum(e.reward for e in episodes)
                                       / len(episodes)})
    return episodes[: len(items)]


def finetune(s: Session, kept: list[Episode], progress: bool, opts=None,
             label: str = "rft sft") -> list[float]:
    """SFT on the kept episodes' clean policy tokens; returns the loss of every update.
    `opts` (epochs, lr, batch_size): s.cfg.rft unless given (`practicum sft` passes cfg.sft);
    `label` prefixes the progress lines."""
    r = opts or s.cfg.rft
    model = s.trainable
    rows = training_rows(kept, [True] * len(kept))
    masks = {id(row): rft_mask(row.segment.loss_mask, row.segment.turn_index,
                               {k for k, t in enumerate(kept[row.episode].turns) if t.malformed})
             for row in rows}
    rows = [row for row in rows if any(masks[id(row)])]
    params = [p for p in model.trainable_parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=r.lr)
    rng = random.Random(s.cfg.run.seed)
    losses: list[float] = []
    updates = r.epochs * -(-len(rows) // r.batch_size) if rows else 0
    with TrainProgress(updates, 0, enabled=progress, label=label, log_dir=s.run_dir) as bar:
        for _ in range(r.epochs if rows else 0):
            order = rows[:]
            rng.shuffle(order)
            for i in range(0, len(order), r.batch_size):
                losses.append(_sft_update(s, order[i:i + r.batch_size], masks, optimizer,
                                          params))
                bar.update(len(losses), {"loss": losses[-1]})
                s.metrics.log(len(losses), {"sft_loss": losses[-1]})
    return losses


def _sft_update(s: Session, batch: list[Row], masks: dict, optimizer, params) -> float:
    """One AdamW update on `batch`, token-mean over all its rows (micro-batches summed)."""
    model, m = s.trainable, s.cfg.train.micro_batch_size
    device = params[0].device
    total = sum(sum(masks[id(row)]) for row in batch)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for i in range(0, len(batch), m):
        micro = batch[i:i + m]
        width = max(len(row.segment.input_ids) for row in micro)
        ids = torch.full((len(micro), width), model.pad_id, dtype=torch.long)
        attn = torch.zeros(len(micro), width, dtype=torch.long)
        for b, row in enumerate(micro):
            ids[b, :len(row.segment.input_ids)] = torch.tensor(row.segment.input_ids)
            attn[b, :len(row.segment.input_ids)] = 1
        mask = pad_rows([torch.tensor(masks[id(row)], dtype=torch.float32) for row in micro],
                        width)
        ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
        logp = model.token_logprobs(ids, attn, score_mask=mask)
        loss = rft_loss(logp, mask) * (sum(sum(masks[id(row)]) for row in micro) / total)
        loss.backward()
        loss_sum += loss.item()
    torch.nn.utils.clip_grad_norm_(params, s.cfg.train.grad_clip)
    optimizer.step()
    return loss_sum
