"""The real SmolLM2-135M-Instruct with a saved LoRA checkpoint behind `practicum serve`."""

import json

import pytest

from practicum.engine.base import SamplingParams

from .conftest import save_run
from .test_app import REVIEW_TOOL

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def smol_api(smollm2_dir, tmp_path_factory):
    from openai import OpenAI

    from practicum.serve.app import build_app
    from practicum.serve.http import ServerThread
    from practicum.serve.loading import load_served

    run = save_run(smollm2_dir, tmp_path_factory.mktemp("runs") / "smol", std=0.002)
    served = load_served(run / "checkpoints" / "step_000003", dtype="float32")
    with ServerThread(build_app(served)) as url:
        yield served, OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
    served.close()


def test_smollm2_checkpoint_answers_chat_and_a_forced_tool_call(smol_api):
    served, client = smol_api
    assert [m.id for m in client.models.list().data] == ["smol", "smol-base"]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(
        model="smol", messages=messages, max_tokens=16, temperature=0
    )
    ids = served.chat.render(messages)
    sample = served.server.generate(
        ids, SamplingParams(temperature=0, max_new_tokens=16, stop_token_ids=served.chat.stop_ids())
    )[0]
    assert r.choices[0].message.content == sample.text
    assert "Paris" in r.choices[0].message.content  # a near-zero adapter keeps the model's sense
    review = client.chat.completions.create(
        model="smol-base",
        temperature=0,
        max_tokens=64,
        tools=[REVIEW_TOOL],
        tool_choice={"type": "function", "function": {"name": "submit_review"}},
        messages=[
            {
                "role": "user",
                "content": "The script ran and printed: validation RMSE 0.42. Review the run.",
            }
        ],
    )
    args = json.loads(review.choices[0].message.tool_calls[0].function.arguments)
    assert set(args) == {"is_bug", "summary", "metric", "lower_is_better"}
    assert isinstance(args["is_bug"], bool) and isinstance(args["summary"], str)
    print("forced submit_review from SmolLM2:", args)
