"""Partial credit (arXiv 2509.01684, Sec. 3.2): what one run of the agent's code earned.

    code --instrument--> code + marker prints with a secret nonce
    run's stdout --parse_milestones--> milestones reached
    milestones + graded submission --mle_reward--> reward
    all of it --judge_run--> RunOutcome

`instrument` asks an LLM (a model-service client; a whole rewrite, or line numbers that
`line_markers` turns into prints) and falls back to `rule_instrumenter`, which uses
`milestone_detection`; `marker_checks` vets the LLM's rewrite; `evidence` checks each
milestone's numbers; `launch` runs the result; `milestones` holds the
marker format and parser, `rewards` the formula, `outcome` the typed result.
"""
