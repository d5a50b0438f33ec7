"""The agents-baseline benchmark's pure parts (benchmarks/agents_baseline.py): which policy a
stage pipeline serves, which evaluations are practicum's before/after, how mini-swe-agent's
replies are read from a trajectory, and the table's arithmetic."""

import json
from pathlib import Path

BENCHMARK = "agents_baseline.py"


def _eval(path: Path, episodes: list[tuple[str, bool, float]], tokens: float = 10.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "tasks": len(episodes),
                "sampled_tokens_mean": tokens,
                "episodes": [
                    {
                        "task_id": t,
                        "solved": s,
                        "reward": r,
                        "metrics": {"patch_lines": 3.0 if s else 0.0},
                        "turns": ["a", "b"],
                    }
                    for t, s, r in episodes
                ],
            }
        )
    )


def test_a_stage_pipeline_serves_its_last_policy_and_compares_first_to_last_eval(bench, tmp_path):
    run = tmp_path / "swe"
    for stage in ("0-rft/rft", "1-rl", "2-rl2"):
        (run / stage / "policy").mkdir(parents=True)
    assert bench.serve_target(run) == run  # no stage finished
    (run / "0-rft" / "stage.json").write_text(json.dumps({"policy": "runs/swe/0-rft/rft/policy"}))
    (run / "1-rl" / "stage.json").write_text(json.dumps({"policy": "runs/swe/0-rft/rft/policy"}))
    assert bench.serve_target(run) == run / "0-rft" / "rft" / "policy"  # 1-rl took no step
    (run / "2-rl2" / "stage.json").write_text(json.dumps({"policy": "2-rl2/policy"}))
    assert bench.serve_target(run) == run / "2-rl2" / "policy"  # relative to the pipeline
    assert bench.serve_target("smollm2-135m-instruct") == "smollm2-135m-instruct"

    _eval(run / "0-rft" / "rft" / "eval" / "before.json", [("t1", False, 0.0), ("t2", False, 0.0)])
    _eval(run / "0-rft" / "rft" / "eval" / "after.json", [("t1", True, 1.0), ("t2", False, 0.0)])
    _eval(run / "2-rl2" / "eval" / "step_000000.json", [("t1", True, 1.0), ("t2", False, 0.0)])
    _eval(run / "2-rl2" / "eval" / "step_000002.json", [("t1", True, 1.0), ("t2", True, 1.0)])
    first, last = bench.eval_files(run)
    assert (first.parent.parent.parent.name, first.name) == ("0-rft", "before.json")
    assert (last.parent.parent.name, last.name) == ("2-rl2", "step_000002.json")

    rows = bench.practicum_rows("practicum-swe", run, ["t2"])  # only the agents' tasks
    assert [(r["policy"], r["task"], r["solved"], r["output"]) for r in rows] == [
        ("base", "t2", False, False),
        ("trained", "t2", True, True),
    ]
    assert rows[0]["tokens"] is None  # a subset of the evaluation: its token mean does not apply


def test_mini_trajectory_replies_count_rejected_ones_as_malformed(bench):
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "user",
            "content": "Tool call error ...",
            "extra": {
                "interrupt_type": "FormatError",
                "response": {
                    "choices": [{"message": {"content": "I will look"}, "finish_reason": "length"}]
                },
            },
        },
        {
            "role": "assistant",
            "content": "ls it",
            "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
        },
        {"role": "tool", "content": '{"returncode": 0}'},
        {"role": "exit", "content": "", "extra": {"exit_status": "LimitsExceeded"}},
    ]
    turns = bench.model_turns(messages)
    assert [(t["text"], t["malformed"]) for t in turns] == [("I will look", True), ("ls it", False)]
    assert turns[1]["commands"] == ['{"command": "ls"}'] and turns[0]["finish_reason"] == "length"


def test_aggregate_means_per_agent_and_policy(bench):
    def rec(agent, policy, task, solved, score, seconds, tokens):
        return {
            "agent": agent,
            "policy": policy,
            "task": task,
            "solved": solved,
            "score": score,
            "seconds": seconds,
            "steps": 2,
            "malformed": 1,
            "output": solved,
            "tokens": tokens,
        }

    records = [
        rec("mini", "base", "a", False, 0.0, 10.0, {"prompt_tokens": 100, "completion_tokens": 8}),
        rec("mini", "base", "b", True, 1.0, 30.0, {"prompt_tokens": 300, "completion_tokens": 4}),
        rec("practicum-mle", "trained", "c#0", True, 0.5, None, None),
        rec("aide", "trained", "c", False, 0.0, 5.0, {"prompt_tokens": 1, "completion_tokens": 2}),
    ]
    rows = bench.aggregate(records)
    assert [(r["agent"], r["policy"]) for r in rows] == [
        ("aide", "trained"),
        ("practicum-mle", "trained"),
        ("mini", "base"),
    ]
    mini = rows[2]
    assert (mini["tasks"], mini["solved_rate"], mini["score_mean"]) == (2, 0.5, 0.5)
    assert (
        mini["seconds_per_task"],
        mini["prompt_tokens_per_task"],
        mini["completion_tokens_per_task"],
    ) == (20.0, 200.0, 6.0)
    assert rows[1]["task_ids"] == ["c"] and rows[1]["seconds_per_task"] is None
    assert bench.usage_delta(
        {"m": {"samples": 1, "prompt_tokens": 5, "completion_tokens": 2}},
        {"m": {"samples": 3, "prompt_tokens": 9, "completion_tokens": 7}},
        "m",
    ) == {"samples": 2, "prompt_tokens": 4, "completion_tokens": 5}
