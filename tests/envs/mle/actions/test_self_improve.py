import json
import random

import pytest

from practicum.envs.mle.actions.self_improve import (
    Solution,
    SolutionBuffer,
    excerpt,
    improvement_prompt,
    sample_prompt_mode,
)


def _sol(code: str, reward: float, valid: bool = True) -> Solution:
    return Solution(
        code=code,
        output=f"ran {code}",
        score=reward - 0.7 if valid else None,
        reward=reward,
        plan="plan",
        valid=valid,
    )


def test_buffer_keeps_best_k_per_task_best_first():
    buffer = SolutionBuffer(k=2)
    assert buffer.add("t", _sol("a", 0.5))
    assert buffer.add("t", _sol("b", 0.9))
    assert buffer.add("t", _sol("c", 0.7))
    assert not buffer.add("t", _sol("d", 0.1))
    assert [s.code for s in buffer.solutions("t")] == ["b", "c"]
    assert buffer.best("t").code == "b"
    assert buffer.solutions("other") == [] and buffer.best("other") is None


def test_buffer_ignores_invalid_solutions_by_default():
    assert not SolutionBuffer().add("t", _sol("x", -9.5, valid=False))
    assert SolutionBuffer(valid_only=False).add("t", _sol("x", -9.5, valid=False))


def test_same_code_is_kept_once_with_its_best_reward():
    buffer = SolutionBuffer(k=3)
    buffer.add("t", _sol("a", 0.5))
    assert buffer.add("t", _sol("a", 0.8))
    assert not buffer.add("t", _sol("a", 0.6))
    assert [(s.code, s.reward) for s in buffer.solutions("t")] == [("a", 0.8)]


def test_pick_is_uniform_over_kept_and_fails_when_empty():
    buffer = SolutionBuffer(k=2)
    buffer.add("t", _sol("a", 0.5))
    buffer.add("t", _sol("b", 0.6))
    rng = random.Random(0)
    picks = {buffer.pick("t", rng).code for _ in range(50)}
    assert picks == {"a", "b"}
    with pytest.raises(KeyError, match="no solution stored for task 'u'"):
        buffer.pick("u", rng)


def test_save_load_roundtrip_is_atomic(tmp_path):
    buffer = SolutionBuffer(k=3)
    buffer.add("t1", _sol("a", 0.5))
    buffer.add("t2", _sol("b", 0.2))
    path = tmp_path / "buffers" / "solutions.json"
    buffer.save(path)
    buffer.add("t1", _sol("c", 0.9))
    buffer.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["solutions.json"]  # no temp file left
    loaded = SolutionBuffer.load(path)
    assert loaded.k == 3 and loaded.valid_only
    assert loaded.solutions("t1") == buffer.solutions("t1")
    assert loaded.solutions("t2") == [_sol("b", 0.2)]


def test_load_rejects_other_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="is not a solution buffer"):
        SolutionBuffer.load(path)


def test_sample_prompt_mode():
    rng = random.Random(0)
    modes = [sample_prompt_mode(rng, p=0.5) for _ in range(2000)]
    assert 0.45 < modes.count("improve") / len(modes) < 0.55
    assert {sample_prompt_mode(rng, p=1.0, can_improve=False) for _ in range(20)} == {"scratch"}
    assert {sample_prompt_mode(rng, p=1.0) for _ in range(20)} == {"improve"}


def test_sample_prompt_mode_draws_once_either_way():
    a, b = random.Random(3), random.Random(3)
    sample_prompt_mode(a, can_improve=True)
    sample_prompt_mode(b, can_improve=False)
    assert a.random() == b.random()


def test_excerpt_redacts_and_cuts_the_middle():
    text = "[[PRACTICUM:abcd:data_loaded]]\n" + "x" * 300 + "END"
    cut = excerpt(text, max_chars=90)
    assert "abcd" not in cut and cut.startswith("[milestone: data_loaded]")
    assert cut.endswith("END") and "characters cut" in cut
    assert excerpt("short") == "short"


def test_improvement_prompt_shows_code_output_and_score():
    prompt = improvement_prompt(
        "Predict y. Reply with a plan and a script.",
        previous_code="model = Ridge()\n",
        previous_output="[[PRACTICUM:ab12:validation_scored]] value=0.31\nval rmse 0.31\n",
        previous_score=0.3456789,
        lower_is_better=True,
    )
    assert prompt.startswith("Predict y.")
    assert "model = Ridge()" in prompt and "val rmse 0.31" in prompt
    assert "ab12" not in prompt and "[milestone: validation_scored value=0.31]" in prompt
    assert "0.34568 (lower is better)" in prompt
    assert "full improved script" in prompt
    template_prompt = improvement_prompt("t", "model = Ridge()", "", None, mode="template")
    assert "no valid submission" in template_prompt and "region" in template_prompt
