"""Which call continues which, and the rows they become: spliced ids, never a re-rendered reply."""

import pytest
from transformers import AutoTokenizer

from practicum.agent.calls import ContextExceeded, EpisodeCalls, reply_key
from practicum.engine.base import Sample
from practicum.engine.chat import ChatFormat


@pytest.fixture(scope="module")
def chat(tiny_model_dir):
    return ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))


def _sample(chat, text: str, stop: bool = True) -> Sample:
    ids = chat.encode(text) + ([chat.tokenizer.eos_token_id] if stop else [])
    return Sample(ids, [-0.5] * len(ids), text, "stop" if stop else "length")


def _call(calls, chat, messages, text, **kw):
    plan = calls.plan(messages, None, True)
    sample = _sample(chat, text)
    calls.record(plan, sample, 3, reply_key(text, []), **kw)
    return plan, sample


def test_a_call_that_extends_the_last_one_continues_its_row_with_the_sampled_ids(chat):
    calls = EpisodeCalls(chat, max_seq_len=1024)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go"}]
    p1, s1 = _call(calls, chat, msgs, " ran  it")  # odd spacing: re-rendering might differ
    msgs2 = msgs + [
        {"role": "assistant", "content": " ran  it"},
        {"role": "user", "content": "and?"},
    ]
    p2, s2 = _call(calls, chat, msgs2, "done")
    assert p2.prompt_ids[: len(p1.prompt_ids) + len(s1.token_ids)] == p1.prompt_ids + s1.token_ids
    assert p2.prompt_ids == p1.prompt_ids + s1.token_ids + p2.inserted
    ep = calls.episode("t", "g")
    (row,) = ep.segments()
    assert row.input_ids == p2.prompt_ids + s2.token_ids
    assert sum(row.loss_mask) == len(s1.token_ids) + len(s2.token_ids)
    assert calls.continued == 1 and calls.segments == 1
    assert all(t.policy_version == 3 for t in ep.turns)


def test_an_edited_history_opens_a_new_segment(chat):
    calls = EpisodeCalls(chat, max_seq_len=1024)
    msgs = [{"role": "user", "content": "Go"}]
    p1, _ = _call(calls, chat, msgs, "step one")
    edited = msgs + [
        {"role": "assistant", "content": "step 1"},  # the agent rewrote the reply
        {"role": "user", "content": "next"},
    ]
    p2, s2 = _call(calls, chat, edited, "two")
    assert p2.thread is None and p2.prompt_ids == chat.render(edited)
    rows = calls.episode("t", "g").segments()
    assert len(rows) == 2 and rows[1].input_ids == p2.prompt_ids + s2.token_ids
    assert calls.continued == 0


def test_tool_calls_continue_when_sent_back_as_returned(chat):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ]
    calls = EpisodeCalls(chat, max_seq_len=1024)
    msgs = [{"role": "user", "content": "list files"}]
    plan = calls.plan(msgs, tools, True)
    text = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'
    calls.record(
        plan, _sample(chat, text), 0, reply_key("", [{"name": "bash", "arguments": {"cmd": "ls"}}])
    )
    back = msgs + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_x",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd":  "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_x", "content": "a.txt"},
    ]
    assert calls.plan(back, tools, True).thread is not None
    assert calls.plan(back, None, True).thread is None  # other tools: another prompt


def test_the_base_model_and_a_busy_thread_are_not_continued(chat):
    calls = EpisodeCalls(chat, max_seq_len=1024)
    msgs = [{"role": "user", "content": "Go"}]
    _call(calls, chat, msgs, "ok")
    more = msgs + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert calls.plan(more, None, adapter=False).thread is None
    first = calls.plan(more, None, True)
    assert first.thread is not None and calls.plan(more, None, True).thread is None
    calls.abort(first)
    assert calls.plan(more, None, True).thread is not None


def test_a_long_history_is_cut_by_whole_messages_and_refused_when_the_last_cannot_fit(chat):
    calls = EpisodeCalls(chat, max_seq_len=120, min_reply_tokens=8)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    for i in range(6):
        msgs += [
            {"role": "assistant", "content": f"reply number {i} " * 3},
            {"role": "user", "content": f"observation {i} " * 3},
        ]
    plan = calls.plan(msgs, None, True)
    assert plan.dropped > 0 and len(plan.prompt_ids) + 8 <= 120
    kept = msgs[:2] + msgs[2 + plan.dropped :]
    assert plan.prompt_ids == chat.render(kept)
    with pytest.raises(ContextExceeded):
        calls.plan(msgs[:2] + [{"role": "user", "content": "x " * 200}], None, True)


def test_untrained_calls_and_forced_prefixes_stay_out_of_the_loss(chat):
    calls = EpisodeCalls(chat, max_seq_len=1024)
    msgs = [{"role": "user", "content": "Go"}]
    prefix = chat.encode('<tool_call>\n{"name": "')
    plan = calls.plan(msgs, None, True, prefix)
    assert plan.prompt_ids[-len(prefix) :] == prefix
    s = _sample(chat, 'f"}')
    calls.record(plan, s, 0, reply_key("x", []), trained=False)
    assert calls.episode("t", "g").segments() == []
