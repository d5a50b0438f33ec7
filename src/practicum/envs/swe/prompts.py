"""What the agent is told: the tool protocol, one worked example, the issue."""

from __future__ import annotations

from practicum.envs.base import Message
from practicum.envs.swe.instance import SweInstance

SYSTEM_PROMPT = """You fix bugs in a Python repository. Use one tool per reply:
<bash>command</bash> runs a shell command in the repository
<view>path 10-40</view> shows lines of a file
<search>text</search> finds text in the repository
<edit>path
<old>
exact lines to replace
</old>
<new>
new lines
</new>
</edit> replaces the old lines with the new ones
<submit></submit> ends the task when the bug is fixed
Do not edit the tests."""

EXAMPLE_MESSAGES: list[Message] = [  # one worked episode, as real chat turns
    {"role": "user", "content": "Issue: add(2, 3) returns -1 instead of 5 in calc/ops.py."},
    {"role": "assistant", "content": "<search>def add</search>"},
    {"role": "user", "content": "calc/ops.py:4:def add(a, b):"},
    {"role": "assistant", "content": "<view>calc/ops.py 4-6</view>"},
    {"role": "user", "content": "    4 def add(a, b):\n    5     return a - b"},
    {
        "role": "assistant",
        "content": "<edit>calc/ops.py\n<old>\n    return a - b\n</old>\n"
        "<new>\n    return a + b\n</new>\n</edit>",
    },
    {
        "role": "user",
        "content": "Edited calc/ops.py at line 5:\n    4 def add(a, b):\n    5     return a + b",
    },
    {"role": "assistant", "content": "<submit></submit>"},
]


def first_messages(instance: SweInstance, few_shot: bool, issue_chars: int) -> list[Message]:
    """System prompt, the optional example, and the task's issue as the first user turn."""
    issue = instance.problem_statement.strip()
    if len(issue) > issue_chars:
        issue = issue[:issue_chars] + "\n[... issue cut ...]"
    messages: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT}]
    messages += EXAMPLE_MESSAGES if few_shot else []
    messages.append(
        {"role": "user", "content": f"Issue: {issue}\nThe repository is the current folder."}
    )
    return messages
