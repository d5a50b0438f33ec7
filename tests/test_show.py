"""`practicum show`: a stored episode in the terminal and as HTML, generic and flow."""

import pytest

from practicum.cli import main
from practicum.episode import Episode, Turn
from practicum.errors import PracticumError
from practicum.show import load_episode, show


def _store(tmp_path, episodes):
    (tmp_path / "episodes.jsonl").write_text("".join(e.to_json() + "\n" for e in episodes))


def test_generic_episode_is_printed_and_saved_as_html(tmp_path, capsys):
    e = Episode(
        "calc/1",
        "g1",
        [1],
        [
            Turn(
                [5],
                [-0.1],
                3,
                action_text="<calc>2+2</calc>",
                observation_text="Result: 4",
                info={"tool": "calc"},
            )
        ],
        reward=1.0,
        solved=True,
        metrics={"calls": 1.0},
    )
    _store(tmp_path, [e])
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for s in ("calc/1", "<calc>2+2</calc>", "Result: 4", "solved", "calls=1"):
        assert s in out
    html = (tmp_path / "show" / "episode_0.html").read_text()
    assert "<calc>2+2</calc>" in html.replace("&lt;", "<").replace("&gt;", ">")


def test_flow_episode_is_rendered_by_role(tmp_path, capsys):
    flow0 = {
        "step": 1,
        "query": "What is 2+3?",
        "analysis": "",
        "plan": {"context": "none", "sub_goal": "add", "tool": "calculator", "malformed": False},
        "executor": "Command: 2+3",
        "command": "2+3",
        "result": "5",
        "error": False,
        "verifier": "Conclusion: STOP",
        "verdict": "STOP",
        "generator": "Answer: 5",
        "answer": "5",
        "gold": "5",
        "correct": True,
        "stopped_by": "verifier",
        "memory": "Query: What is 2+3?\nAction Step 1:\n  Tool: calculator",
    }
    e = Episode(
        "flow/1",
        "g",
        [1],
        [Turn([5], [-0.1], 0, action_text="Context: none", info={"flow": flow0})],
        reward=1.0,
        solved=True,
    )
    _store(tmp_path, [e, e])
    path = show(tmp_path, -1)
    out = capsys.readouterr().out
    for s in (
        "planner",
        "executor",
        "verifier",
        "STOP",
        "generator",
        "correct",
        "final memory",
        "Action Step 1",
    ):
        assert s in out
    assert path.name == "episode_1.html" and path.exists()


def test_bad_run_or_index_is_a_clear_error(tmp_path):
    with pytest.raises(PracticumError, match="no episodes.jsonl"):
        load_episode(tmp_path, None)
    _store(tmp_path, [Episode("t", "g", [1])])
    with pytest.raises(PracticumError, match="episodes 0..0"):
        load_episode(tmp_path, 5)
