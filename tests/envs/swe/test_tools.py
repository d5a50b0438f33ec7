"""Tool-call parsing and truncation (no sandbox), and each tool once in a real workspace."""

from __future__ import annotations

import pytest

from practicum.envs.swe.tools import STOP_STRINGS, ParseError, parse_action, truncate


def test_stop_strings_never_match_their_own_opening():
    openings = ["<bash>", "<view>", "<search>", "<edit>", "<submit>"]
    for stop in STOP_STRINGS:
        for opening in openings:
            assert stop not in opening + "ls -la"


@pytest.mark.parametrize(
    "reply,tool,body",
    [
        ("<bash>ls</bash>", "bash", "ls"),
        ("I will look first.\n<view>a.py 3-9</view>", "view", "a.py 3-9"),
        ("<search>def f</search><bash>rm x</bash>", "search", "def f"),
        ("<submit></submit>", "submit", ""),
        ("done <submit/>", "submit", ""),
    ],
)
def test_first_complete_tag_is_the_action(reply, tool, body):
    a = parse_action(reply)
    assert (a.tool, a.body) == (tool, body)


@pytest.mark.parametrize(
    "reply,needle",
    [
        ("I think the bug is in add.", "No tool call"),
        ("<bash>pytest -q", "not closed with </bash>"),
        ("<bash>  </bash>", "empty"),
        ("```bash\nls\n```", "No tool call"),
    ],
)
def test_malformed_replies_get_a_corrective_message(reply, needle):
    with pytest.raises(ParseError, match=needle):
        parse_action(reply)


def test_truncate_keeps_head_and_tail_and_says_how_much_was_cut():
    text = "HEAD" + "x" * 5000 + "TAIL"
    out = truncate(text, 300)
    assert out.startswith("HEAD") and out.endswith("TAIL") and len(out) <= 300
    cut = int(out.split("[... ")[1].split(" ")[0])
    assert cut == len(text) - len(out.split("\n[...")[0]) - len(out.split("cut ...]\n")[1])
    assert truncate("short", 300) == "short"
