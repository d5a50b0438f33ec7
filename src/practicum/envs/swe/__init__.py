"""SWE agents in real repositories (arXiv 2508.03501): workspaces, tools, FULL-rule grading,
SWE-smith-style task synthesis."""

from practicum.envs.swe import env as _env  # noqa: E402,F401  (registers "swe")
