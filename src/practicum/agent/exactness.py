"""Check an outside agent's episodes against the endpoint's request log, kept apart from them.

    report = check_exactness(episodes, Path("RUN/agent_requests.jsonl"))
    report.ok, report.trained_turns, report.problems

Every trained turn of every training row must be one engine call of the log: the row's ids
before the turn are that call's prompt ids, the turn's ids its sampled ids, and the turn's
behaviour log-probs and policy version the ones the engine returned. So what the learner
trains on is what the engine saw and sampled, token for token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from practicum.episode import Episode


@dataclass
class ExactnessReport:
    trained_turns: int = 0
    """Trained turns checked."""
    calls: int = 0
    """Engine calls in the log for these episodes."""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.trained_turns > 0


def read_request_log(path: Path) -> dict[str, list[dict]]:
    """episode id -> its engine calls, in the order they finished."""
    calls: dict[str, list[dict]] = {}
    for line in Path(path).read_text().splitlines():
        entry = json.loads(line)
        calls.setdefault(entry["episode_id"], []).append(entry)
    return calls


def check_exactness(episodes: list[Episode], request_log: Path) -> ExactnessReport:
    log = read_request_log(request_log)
    report = ExactnessReport()
    for e in episodes:
        entries = log.get(e.episode_id, [])
        report.calls += len(entries)
        index = {(tuple(c["prompt_ids"]), tuple(c["sampled_ids"])): c for c in entries}
        for r, row in enumerate(e.segments()):
            for k, start, end in _trained_spans(row.turn_index, row.loss_mask):
                report.trained_turns += 1
                key = (tuple(row.input_ids[:start]), tuple(row.input_ids[start:end]))
                call = index.get(key)
                where = f"episode {e.episode_id} row {r} turn {k}"
                if call is None:
                    report.problems.append(
                        f"{where}: no engine call had this context and these sampled ids"
                    )
                    continue
                turn = e.turns[k]
                if list(turn.logprobs) != call["logprobs"]:
                    report.problems.append(f"{where}: log-probs differ from the engine's")
                if turn.policy_version != call["version"]:
                    report.problems.append(
                        f"{where}: version {turn.policy_version} but the "
                        f"engine sampled at {call['version']}"
                    )
    return report


def _trained_spans(turn_index: list[int], mask: list[int]) -> list[tuple[int, int, int]]:
    """(turn, start, end) of each run of positions a trained turn sampled."""
    spans: list[tuple[int, int, int]] = []
    for pos, (k, m) in enumerate(zip(turn_index, mask)):
        if not m:
            continue
        if spans and spans[-1][0] == k and spans[-1][2] == pos:
            spans[-1] = (k, spans[-1][1], pos + 1)
        else:
            spans.append((k, pos, pos + 1))
    return spans
