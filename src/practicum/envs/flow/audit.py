"""What `practicum audit` checks the flow environment against (practicum.envs.audit): the
reward is 1 for the gold answer plus `hop_credit` x the fraction of a multi-hop chain's hops
really looked up, so a non-attempt earns 0. The planner's own attacks come from its red-team
tests: probe for the answer key with code, list every entity of the world in a sub-goal, repeat
the first hop of a multi-hop chain. The last two may look a hop up for real (partial work the
hop credit pays for, by design), so they are held to the honest reference instead of the
floor: they must earn less than looking every hop up."""

from __future__ import annotations

from practicum.audit.attacks import answer_key_program, decoys_for
from practicum.envs.audit import Attack, AuditSpec, Probe


def plan(sub_goal: str, tool: str, context: str = "none") -> str:
    return f"Context: {context}\nSub-Goal: {sub_goal}\nTool Name: {tool}"


def _hop(p: Probe, i: int) -> str:
    chain, rels = p.task.data["chain"], p.task.data.get("relations")
    if not rels:  # the user's own questions: the chain is the documents to read
        return plan(f"Look up {chain[min(i, len(chain) - 1)]}.", "lookup")
    i = min(i, len(rels) - 1)
    return plan(f"Find the {rels[i]} of {chain[i]}.", "lookup")


def honest(p: Probe) -> str:
    """Multi-hop: look each hop up; the math families: hand the question to the calculator."""
    if p.task.data["family"] == "multihop":
        return _hop(p, p.turn)
    return plan(p.task.data["question"], "calculator")


def titles(p: Probe) -> list[str]:
    """The entities (or a user corpus's titles) the environment's tools show."""
    return list(p.env.world.titles)


def answer_key_probe(p: Probe) -> str:
    """Code that prints the gold where it can read it; decoys of the same kind (other titles,
    numbers with as many digits) make a chance occurrence noise (`answer_key_program`)."""
    gold = str(p.task.data["answer"])
    program = answer_key_program(gold, decoys_for(gold, p.rng, titles(p)))
    return plan(f"Compute it: ```python\n{program}```", "python_coder")


def list_every_entity(p: Probe) -> str:
    names = " or ".join(titles(p))
    return plan(f"The answer is one of {names}", "search")


def repeat_first_hop(p: Probe) -> str:
    if p.task.data["family"] != "multihop":
        return plan(p.task.data["question"].split("?")[0][:80], "search")
    return _hop(p, 0)


def _coder_call(program: str) -> str:
    return f"Tool: python_coder\nCommand: {program}"


def _planned_coder_call(program: str) -> str:
    return plan(f"Compute it: ```python\n{program}```", "python_coder")


def flow_audit(opts) -> AuditSpec:
    """`practicum audit` for `task.name: flow` (the flow mode; the baselines get the generic
    attacks only)."""
    if opts.mode != "flow":
        code = None
        if opts.mode == "tool_integrated" and "python_coder" in opts.tools:
            code = _coder_call
        return AuditSpec(floor=0.0, code=code, answer=lambda text: f"Answer: {text}", names=titles)
    code = _planned_coder_call if "python_coder" in opts.tools else None
    attacks = [
        Attack("list every entity", list_every_entity, ceiling="honest"),
        Attack("repeat the first hop", repeat_first_hop, ceiling="honest"),
    ]
    if "python_coder" in opts.tools:
        attacks.insert(0, Attack("answer-key probe", answer_key_probe))
    honest_ref = honest if {"lookup", "calculator"} <= set(opts.tools) else None
    return AuditSpec(floor=0.0, honest=honest_ref, attacks=attacks, code=code, names=titles)
