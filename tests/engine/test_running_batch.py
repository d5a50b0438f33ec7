"""Continuous batching: rows that join and leave a running batch between decode steps sample
what they would sample alone (tokens exactly, log-probs to float rounding)."""

import pytest

from practicum.engine.base import SamplingParams
from practicum.engine.hf import PolicyConfig, load_hf_engine
from practicum.engine.running_batch import RunningBatch


@pytest.fixture(scope="module")
def sampler(tiny_model_dir):
    return load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))[1]


@pytest.fixture(scope="module")
def prompts(sampler) -> list[list[int]]:
    tok = sampler.tokenizer
    return [
        tok(t).input_ids
        for t in [
            "Hello there, how are you today? Tell me a long story",
            "Hi",
            "def f(x):\n    return",
        ]
    ]


def run(batch: RunningBatch, joins: dict[int, list[tuple]], steps: int = 100) -> list:
    """Step `batch`, adding joins[k] = [(prompt, params, seed)] before step k; rows in order."""
    rows = []
    for k in range(steps):
        rows += [batch.add(*req) for req in joins.get(k, [])]
        if not batch and k > max(joins):
            break
        batch.step()
    return rows


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0, max_new_tokens=14),
        SamplingParams(temperature=0.9, top_p=0.9, max_new_tokens=14),
    ],
)
def test_rows_joining_at_any_step_sample_as_if_alone(sampler, prompts, params):
    alone = [sampler.generate([p], params, seeds=[11 + i])[0] for i, p in enumerate(prompts)]
    rows = run(
        RunningBatch(sampler, adapter=True),
        {
            0: [(prompts[0], params, 11)],
            3: [(prompts[1], params, 12)],
            7: [(prompts[2], params, 13)],
        },
    )
    for row, solo in zip(rows, alone):
        assert row.token_ids == solo.token_ids
        assert row.logprobs == pytest.approx(solo.logprobs, abs=1e-4)
        assert row.finish_reason == solo.finish_reason
        assert row.sample(sampler.tokenizer).text == solo.text


def test_rows_with_other_params_and_the_base_model_share_steps(sampler, prompts):
    short = SamplingParams(temperature=0.0, max_new_tokens=3)
    long = SamplingParams(temperature=0.7, max_new_tokens=20)
    policy, base = RunningBatch(sampler, adapter=True), RunningBatch(sampler, adapter=False)
    a = policy.add(prompts[1], long, 5)
    b = policy.add(prompts[0], short)  # the longer prompt: `a` is left-padded beside it
    c = base.add(prompts[2], short)
    widths = []
    while policy or base:
        policy.step()
        base.step()
        widths.append(policy._mask.shape[1] if policy.rows else 0)
    assert a.token_ids == sampler.generate([prompts[1]], long, seeds=[5])[0].token_ids
    assert b.token_ids == sampler.generate([prompts[0]], short)[0].token_ids
    assert c.token_ids == sampler.generate([prompts[2]], short, adapter=False)[0].token_ids
    # once the short row left, the long row's cache holds no padding: its prompt and the
    # tokens fed so far (all but the last two sampled at the step before its last)
    assert widths[-2] == len(prompts[1]) + len(a.token_ids) - 2


def test_a_removed_row_stops_at_once_and_stop_ids_end_a_row(sampler, prompts):
    batch = RunningBatch(sampler, adapter=True)
    params = SamplingParams(temperature=0.0, max_new_tokens=30)
    gone = batch.add(prompts[0], params)
    free = SamplingParams(temperature=1.0, max_new_tokens=30)
    first = sampler.generate([prompts[1]], free, seeds=[3])[0].token_ids
    k = next(k for k in range(1, len(first)) if first[k] not in first[:k])
    stopped = batch.add(
        prompts[1],
        SamplingParams(temperature=1.0, max_new_tokens=30, stop_token_ids=(first[k],)),
        3,
    )
    batch.step()
    batch.remove(gone)
    while batch:
        batch.step()
    assert len(gone.token_ids) == 1 and gone.finish_reason is None
    assert stopped.token_ids == first[: k + 1] and stopped.finish_reason == "stop"
