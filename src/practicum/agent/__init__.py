"""Training the agents people already run (`rollout.agent`): an unmodified agent program,
started once per episode in the environment's sandbox, talks to an episode-scoped
OpenAI-compatible endpoint of the run's policy; every call is recorded as the tokens practicum
rendered and sampled, and the environment grades the outcome when the agent exits.

    calls.py     which call continues which, the token-exact turns they become (the episode)
    live.py      one live episode: its key, its calls, the limits they are admitted under
    endpoint.py  the HTTP endpoint: keys, the policy's engine, tools, the request log
    forward.py   the loopback forwarder inside the sandbox (network unshared: a Unix socket)
    runner.py    one episode: the environment's task, the sandboxed agent, the grade
    exactness.py the check of trained turns against the request log
"""
