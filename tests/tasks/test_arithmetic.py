import pytest

from practicum.tasks.arithmetic import make_tasks, split_tasks

GEN = {"basic_arithmetic": 0.5, "chain_sum": 0.3, "gsm_symbolic": 0.2}


def test_tasks_are_deterministic_and_mixed():
    a = make_tasks(GEN, 40, seed=3, split="train")
    b = make_tasks(GEN, 40, seed=3, split="train")
    assert [t.data["question"] for t in a] == [t.data["question"] for t in b]
    kinds = {t.task_id.split("/")[1] for t in a}
    assert kinds == set(GEN)


def test_held_out_questions_never_appear_in_training():
    train, held = split_tasks(GEN, 200, 30, seed=0)
    assert len(held) == 30
    assert not {t.data["question"] for t in held} & {t.data["question"] for t in train}


def test_unknown_generator_is_named():
    with pytest.raises(ValueError, match="no_such_gen"):
        make_tasks({"no_such_gen": 1.0}, 4, 0, "train")
