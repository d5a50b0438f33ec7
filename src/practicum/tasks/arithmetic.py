"""Arithmetic and word problems from reasoning-gym, split into training and held-out tasks."""

from __future__ import annotations

import json
import random

import reasoning_gym

from practicum.envs.base import Task
from practicum.errors import ConfigError


def gym_entries(name: str, size: int, seed: int) -> list[dict]:
    try:
        ds = reasoning_gym.create_dataset(name, size=size, seed=seed)
    except Exception as e:  # reasoning-gym raises a bare ValueError for unknown names
        raise ConfigError(
            f"config error at task.options.generators: unknown reasoning-gym "
            f"generator {name!r} ({e})"
        ) from e
    return [json.loads(json.dumps(ds[i], default=str)) for i in range(size)]


def make_tasks(generators: dict[str, float], size: int, seed: int, split: str) -> list[Task]:
    """`size` tasks drawn from the weighted generators; `split` ('train'/'eval') picks the seed.

    Held-out tasks come from a disjoint seed and any question also in training is dropped,
    so evaluation measures generalisation, not recall.
    """
    if not generators:
        raise ConfigError("config error at task.options.generators: name at least one generator")
    total = sum(generators.values())
    split_seed = seed if split == "train" else seed + 1_000_003
    rng = random.Random(split_seed)
    tasks: list[Task] = []
    for gi, (name, weight) in enumerate(sorted(generators.items())):
        n = max(1, round(size * weight / total))
        for i, e in enumerate(gym_entries(name, n, split_seed * 101 + gi)):
            tasks.append(Task(f"{split}/{name}/{i}", {"question": e["question"], "entry": e}))
    rng.shuffle(tasks)
    return tasks[:size]


def split_tasks(generators: dict[str, float], train_size: int, eval_size: int, seed: int):
    train = make_tasks(generators, train_size, seed, "train")
    seen = {t.data["question"] for t in train}
    held_out = [
        t
        for t in make_tasks(generators, eval_size * 2, seed, "eval")
        if t.data["question"] not in seen
    ][:eval_size]
    return train, held_out
