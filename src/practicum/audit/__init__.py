"""`practicum audit`: a reward-hacking audit any environment can be put through (attacks,
verdicts: practicum.audit.run; what an environment declares: practicum.envs.audit)."""
