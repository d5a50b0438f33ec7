"""AgentFlow in practicum: a planner (the trainable policy) with frozen executor, verifier and
generator sharing a memory, on offline tools and generated tasks (arXiv 2510.05592).

    task:
      name: flow
      options: {families: {multihop: 1, arithmetic: 1}, executor: base, verifier: rules, ...}

Train it with `algo.advantage: flow_grpo` (every planner turn a sample, the final reward
broadcast to every turn, groups over all turn-samples of a task's rollouts).
"""

from practicum.envs.flow.audit import flow_audit
from practicum.envs.flow.suite import FlowOptions, flow_suite
from practicum.envs.registry import register_env

register_env("flow", FlowOptions, flow_suite, audit=flow_audit)

__all__ = ["FlowOptions", "flow_suite"]
