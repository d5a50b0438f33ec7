"""The final answer of an outside agent (`rollout.agent`): the file it wrote, else its last
reply. Environments whose outcome is an answer (toy, calculator) grade this text."""

from __future__ import annotations

from practicum.envs.base import AgentOutcome
from practicum.envs.sandbox import read_workdir_file

ANSWER_FILE = "answer.txt"
"""The file in its work folder an agent may write its final answer to."""


def final_answer(
    outcome: AgentOutcome, name: str = ANSWER_FILE, max_bytes: int = 100_000
) -> str | None:
    """`name` in the agent's work folder when it left one (read without following links),
    else the text of the policy's last reply to it; None when there is neither."""
    try:
        return read_workdir_file(outcome.workdir, name, max_bytes).decode("utf-8", "replace")
    except (OSError, ValueError):  # absent, a link, not a regular file, too large
        return outcome.last_reply
